//! `current_time`: the date and time, which a model cannot know otherwise. Its description
//! gives no example time: a small model copied the example instead of calling the tool.

use agentry::tool::tool;
use chrono::{Local, SecondsFormat, Utc};

/// Get the current date and time, as RFC 3339 with the weekday in brackets. Call it whenever
/// the answer depends on today's date or the time of day: you do not know them, and must never
/// guess them. Local time (with its UTC offset) unless `utc` is true.
///
/// # Arguments
/// * `utc` - true to get the time in UTC instead of the local time zone (default false)
#[tool]
pub(crate) fn current_time(utc: Option<bool>) -> String {
    if utc.unwrap_or(false) {
        let now = Utc::now();
        format!(
            "{} ({})",
            now.to_rfc3339_opts(SecondsFormat::Secs, true),
            now.format("%A")
        )
    } else {
        let now = Local::now();
        format!(
            "{} ({})",
            now.to_rfc3339_opts(SecondsFormat::Secs, false),
            now.format("%A")
        )
    }
}
