//! Retry policy for model calls.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

/// When and how long to wait before retrying a failed model call.
///
/// Retries happen on connection errors, timeouts, HTTP 429 and 5xx, and only before any part of
/// the response was used. The server's `Retry-After` (seconds or HTTP date) or `retry-after-ms`
/// wins over the computed backoff, capped by [`RetryPolicy::max_delay`].
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 = no retry).
    pub max_retries: u32,
    /// Delay before the first retry; doubled each time.
    pub initial_backoff: Duration,
    /// Upper bound of any single delay, including a server's `Retry-After`.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 4,
            initial_backoff: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        }
    }

    /// The delay before retry number `retry` (1-based), honouring the server's headers.
    pub(crate) fn delay(&self, retry: u32, headers: Option<&HeaderMap>) -> Duration {
        if let Some(server) = headers.and_then(retry_after) {
            return server.min(self.max_delay);
        }
        let factor = 1u32.checked_shl(retry.saturating_sub(1)).unwrap_or(u32::MAX);
        let base = self.initial_backoff.saturating_mul(factor).min(self.max_delay);
        // Up to 25% jitter keeps many clients from retrying in lockstep.
        let jitter = base.mul_f64(f64::from(jitter_percent()) / 400.0);
        (base + jitter).min(self.max_delay)
    }
}

fn jitter_percent() -> u8 {
    uuid::Uuid::new_v4().as_bytes()[0] % 101
}

/// The delay a server asks for, from `retry-after-ms` or `retry-after`.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = headers.get("retry-after")?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn retry_after_seconds_and_ms() {
        assert_eq!(
            retry_after(&headers("retry-after", "2")),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&headers("retry-after-ms", "150")),
            Some(Duration::from_millis(150))
        );
        assert_eq!(retry_after(&headers("retry-after", "soon")), None);
    }

    #[test]
    fn retry_after_http_date_in_the_past_is_zero() {
        let h = headers("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT");
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy {
            max_retries: 10,
            initial_backoff: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
        };
        let d1 = p.delay(1, None);
        let d3 = p.delay(3, None);
        assert!(d1 >= Duration::from_millis(100) && d1 <= Duration::from_millis(125));
        assert!(d3 >= Duration::from_millis(400) && d3 <= Duration::from_millis(500));
        assert_eq!(p.delay(30, None), Duration::from_millis(1000));
        let server = headers("retry-after", "3600");
        assert_eq!(p.delay(1, Some(&server)), Duration::from_millis(1000));
    }
}
