//! The tools of the evaluation: the read-only built-ins over a fixture directory, and synthetic
//! tools with fixed answers (weather, currencies, orders, parcels, stock and crypto prices), so
//! that every expected call and answer is known in advance.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agentry::tool::{Toolkit, tool};
use anyhow::Context;
use schemars::JsonSchema;
use serde::Deserialize;

use agentry_tools::register_builtin_tools;

/// A temperature unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TempUnit {
    // No doc comments on the variants: with them, schemars writes `oneOf` instead of a plain
    // `enum`, which small models follow less well.
    Celsius,
    Fahrenheit,
}

/// City (and its accepted spellings, lower case), temperature in °C, conditions.
const WEATHER: [(&[&str], f64, &str); 8] = [
    (&["paris", "巴黎"], 18.0, "cloudy"),
    (&["tokyo", "东京"], 22.0, "sunny"),
    (&["oslo", "奥斯陆"], 4.0, "light snow"),
    (&["cairo", "开罗"], 31.0, "sunny"),
    (&["london", "伦敦"], 12.0, "rain"),
    (&["new york", "new york city", "nyc", "纽约"], 15.0, "windy"),
    (&["beijing", "北京", "北京市"], 20.0, "hazy"),
    (&["shanghai", "上海", "上海市"], 24.0, "cloudy"),
];

/// Day-by-day change of the temperature in a forecast, and the conditions of days 2 onwards.
const FORECAST_SHIFT: [f64; 7] = [0.0, 1.0, -1.0, 2.0, -2.0, 1.0, 0.0];
const FORECAST_SKY: [&str; 6] = ["sunny", "cloudy", "rain", "sunny", "windy", "cloudy"];

/// Units of each currency per US dollar.
const RATES: [(&str, f64); 6] = [
    ("USD", 1.0),
    ("EUR", 0.92),
    ("GBP", 0.79),
    ("JPY", 150.0),
    ("CNY", 7.2),
    ("CHF", 0.88),
];

const ORDERS: [(i64, &str); 4] = [
    (
        1042,
        "Order 1042: shipped on 2026-11-28 via DHL, tracking number ZX-88231, expected delivery 2026-12-03.",
    ),
    (
        2077,
        "Order 2077: processing (payment received, not shipped yet); expected to ship on 2026-12-02.",
    ),
    (
        3155,
        "Order 3155: delivered on 2026-11-20, tracking number ZX-90417, signed for by R. Okafor.",
    ),
    (
        4410,
        "Order 4410: cancelled by the customer on 2026-11-15; the refund of 59.90 EUR was issued.",
    ),
];

const PARCELS: [(&str, &str); 2] = [
    (
        "ZX-88231",
        "Parcel ZX-88231: in transit, last scanned at the Leipzig hub on 2026-11-30 08:12; expected delivery 2026-12-03.",
    ),
    (
        "ZX-90417",
        "Parcel ZX-90417: delivered in Lyon on 2026-11-20 at 10:41.",
    ),
];

const STOCKS: [(&str, f64); 5] = [
    ("AAPL", 187.25),
    ("MSFT", 402.10),
    ("TSLA", 244.80),
    ("NVDA", 121.50),
    ("GOOGL", 165.30),
];

const CRYPTO: [(&str, f64); 4] = [
    ("BTC", 64250.0),
    ("ETH", 3120.50),
    ("SOL", 142.75),
    ("DOGE", 0.16),
];

fn key(text: &str) -> String {
    text.trim().to_lowercase()
}

fn city(name: &str) -> Result<(&'static str, f64, &'static str), String> {
    let wanted = key(name);
    WEATHER
        .iter()
        .find(|(names, _, _)| names.contains(&wanted.as_str()))
        .map(|(names, celsius, sky)| (names[0], *celsius, *sky))
        .ok_or_else(|| {
            let known: Vec<&str> = WEATHER.iter().map(|(names, _, _)| names[0]).collect();
            format!("unknown city {name:?}; known cities: {}", known.join(", "))
        })
}

fn display_city(key: &str) -> String {
    key.split(' ')
        .map(|word| {
            let mut chars = word.chars();
            match chars.next() {
                Some(first) => first.to_uppercase().chain(chars).collect(),
                None => String::new(),
            }
        })
        .collect::<Vec<String>>()
        .join(" ")
}

fn temperature(celsius: f64, unit: Option<TempUnit>) -> String {
    match unit.unwrap_or(TempUnit::Celsius) {
        TempUnit::Celsius => format!("{} °C", round2(celsius)),
        TempUnit::Fahrenheit => format!("{} °F", round2(celsius * 9.0 / 5.0 + 32.0)),
    }
}

fn round2(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

/// Get the current weather of a city: temperature and conditions.
///
/// # Arguments
/// * `city` - the city, e.g. "Paris"
/// * `unit` - the temperature unit (default celsius)
#[tool]
fn get_weather(city: String, unit: Option<TempUnit>) -> Result<String, String> {
    let (name, celsius, sky) = self::city(&city)?;
    Ok(format!(
        "{}: {}, {sky}",
        display_city(name),
        temperature(celsius, unit)
    ))
}

/// Get the weather forecast of a city for the next days, one line per day.
///
/// # Arguments
/// * `city` - the city, e.g. "Paris"
/// * `days` - how many days, from 1 to 7
/// * `unit` - the temperature unit (default celsius)
#[tool]
fn get_forecast(city: String, days: i64, unit: Option<TempUnit>) -> Result<String, String> {
    let (name, celsius, sky) = self::city(&city)?;
    let count = usize::try_from(days)
        .ok()
        .filter(|d| (1..=FORECAST_SHIFT.len()).contains(d))
        .ok_or_else(|| format!("days must be from 1 to 7, not {days}"))?;
    let lines: Vec<String> = (0..count)
        .map(|day| {
            let conditions = if day == 0 {
                sky
            } else {
                FORECAST_SKY[(day - 1) % FORECAST_SKY.len()]
            };
            format!(
                "Day {}: {}, {conditions}",
                day + 1,
                temperature(celsius + FORECAST_SHIFT[day], unit)
            )
        })
        .collect();
    Ok(format!(
        "Forecast for {}:\n{}",
        display_city(name),
        lines.join("\n")
    ))
}

fn rate(code: &str) -> Result<f64, String> {
    let wanted = match code.trim().to_uppercase().as_str() {
        "RMB" => "CNY".to_owned(),
        other => other.to_owned(),
    };
    RATES
        .iter()
        .find(|(c, _)| *c == wanted)
        .map(|(_, r)| *r)
        .ok_or_else(|| {
            let known: Vec<&str> = RATES.iter().map(|(c, _)| *c).collect();
            format!(
                "unknown currency {code:?}; use one of the codes {}",
                known.join(", ")
            )
        })
}

/// Convert an amount of money from one currency to another at today's rate.
///
/// # Arguments
/// * `amount` - the amount to convert, e.g. 12.5
/// * `from` - ISO code of the currency of the amount, e.g. "USD"
/// * `to` - ISO code of the currency wanted, e.g. "EUR"
#[tool]
fn convert_currency(amount: f64, from: String, to: String) -> Result<String, String> {
    let (from_rate, to_rate) = (rate(&from)?, rate(&to)?);
    if !amount.is_finite() {
        return Err("the amount must be a finite number".to_owned());
    }
    let converted = round2(amount / from_rate * to_rate);
    Ok(format!(
        "{} {} = {} {} (rate {})",
        amount,
        from.trim().to_uppercase(),
        converted,
        to.trim().to_uppercase(),
        to_rate / from_rate
    ))
}

/// Get the status of a customer order by its number: shipped, processing, delivered or
/// cancelled, with the tracking number of a shipped order.
///
/// # Arguments
/// * `order_id` - the order number, e.g. 1042
#[tool]
fn get_order_status(order_id: i64) -> Result<String, String> {
    ORDERS
        .iter()
        .find(|(id, _)| *id == order_id)
        .map(|(_, status)| (*status).to_owned())
        .ok_or_else(|| format!("no order with number {order_id}"))
}

/// Track a parcel by its tracking number (not an order number): where it is now.
///
/// # Arguments
/// * `tracking_number` - the carrier's tracking number, e.g. "ZX-12345"
#[tool]
fn track_shipment(tracking_number: String) -> Result<String, String> {
    let wanted = tracking_number.trim().to_uppercase();
    PARCELS
        .iter()
        .find(|(number, _)| *number == wanted)
        .map(|(_, status)| (*status).to_owned())
        .ok_or_else(|| format!("no parcel with tracking number {tracking_number:?}"))
}

fn price(table: &[(&str, f64)], symbol: &str, kind: &str) -> Result<String, String> {
    let wanted = symbol.trim().to_uppercase();
    table
        .iter()
        .find(|(s, _)| *s == wanted)
        .map(|(s, price)| format!("{s}: {price:.2} USD"))
        .ok_or_else(|| format!("unknown {kind} symbol {symbol:?}"))
}

/// Get the latest price of a company's stock (shares traded on a stock exchange), in US dollars.
///
/// # Arguments
/// * `symbol` - the stock ticker symbol, e.g. "IBM"
#[tool]
fn get_stock_price(symbol: String) -> Result<String, String> {
    price(&STOCKS, &symbol, "stock")
}

/// Get the latest price of a cryptocurrency, in US dollars.
///
/// # Arguments
/// * `symbol` - the cryptocurrency's symbol, e.g. "XRP"
#[tool]
fn get_crypto_price(symbol: String) -> Result<String, String> {
    price(&CRYPTO, &symbol, "cryptocurrency")
}

/// Registers the tools an evaluation prompt may use: the read-only built-ins confined to
/// `workdir` (not `write_file`: it needs the user's approval) and the synthetic tools.
pub fn eval_toolkit(workdir: &Path) -> anyhow::Result<Toolkit> {
    let toolkit = Toolkit::new();
    register_builtin_tools(&toolkit, workdir)?;
    toolkit.remove("write_file");
    toolkit.register(GetWeatherTool)?;
    toolkit.register(GetForecastTool)?;
    toolkit.register(ConvertCurrencyTool)?;
    toolkit.register(GetOrderStatusTool)?;
    toolkit.register(TrackShipmentTool)?;
    toolkit.register(GetStockPriceTool)?;
    toolkit.register(GetCryptoPriceTool)?;
    Ok(toolkit)
}

/// A directory of fixture files, removed when dropped.
pub struct Fixture {
    dir: PathBuf,
}

impl Fixture {
    /// Creates a fresh directory in the system's temporary directory and writes `files`
    /// (relative path → content) into it.
    pub fn create(files: &BTreeMap<String, String>) -> anyhow::Result<Fixture> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let dir = std::env::temp_dir().join(format!("agentry-eval-{}-{stamp}", std::process::id()));
        std::fs::create_dir(&dir)
            .with_context(|| format!("cannot create the fixture directory {}", dir.display()))?;
        let fixture = Fixture { dir };
        for (relative, content) in files {
            let path = Path::new(relative);
            anyhow::ensure!(
                path.is_relative()
                    && path
                        .components()
                        .all(|c| matches!(c, std::path::Component::Normal(_))),
                "fixture path {relative:?} must be relative, without '..'"
            );
            let target = fixture.dir.join(path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            std::fs::write(&target, content).with_context(|| format!("cannot write {}", target.display()))?;
        }
        Ok(fixture)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_tools_answer_from_their_tables() {
        assert_eq!(
            get_weather("  PARIS ".into(), None).unwrap(),
            "Paris: 18 °C, cloudy"
        );
        assert_eq!(
            get_weather("new york".into(), Some(TempUnit::Fahrenheit)).unwrap(),
            "New York: 59 °F, windy"
        );
        assert_eq!(get_weather("北京".into(), None).unwrap(), "Beijing: 20 °C, hazy");
        assert!(
            get_weather("Atlantis".into(), None)
                .unwrap_err()
                .contains("unknown city")
        );
        assert_eq!(
            get_forecast("Tokyo".into(), 3, None).unwrap(),
            "Forecast for Tokyo:\nDay 1: 22 °C, sunny\nDay 2: 23 °C, sunny\nDay 3: 21 °C, cloudy"
        );
        assert!(get_forecast("Tokyo".into(), 8, None).is_err());
        assert!(get_forecast("Tokyo".into(), 0, None).is_err());
        assert_eq!(
            convert_currency(100.0, "usd".into(), "EUR".into()).unwrap(),
            "100 USD = 92 EUR (rate 0.92)"
        );
        assert!(
            convert_currency(350.0, "EUR".into(), "USD".into())
                .unwrap()
                .contains("= 380.43 USD")
        );
        assert!(
            convert_currency(100.0, "USD".into(), "RMB".into())
                .unwrap()
                .contains("= 720 RMB")
        );
        assert!(convert_currency(1.0, "euros".into(), "USD".into()).is_err());
        assert!(get_order_status(1042).unwrap().contains("ZX-88231"));
        assert!(get_order_status(1).is_err());
        assert!(track_shipment("zx-88231".into()).unwrap().contains("Leipzig"));
        assert_eq!(get_stock_price("msft".into()).unwrap(), "MSFT: 402.10 USD");
        assert!(get_stock_price("BTC".into()).is_err());
        assert_eq!(get_crypto_price("BTC".into()).unwrap(), "BTC: 64250.00 USD");
    }

    #[test]
    fn the_toolkit_has_the_read_only_builtins_and_the_synthetic_tools() {
        let fixture =
            Fixture::create(&BTreeMap::from([("docs/a.txt".to_owned(), "alpha\n".to_owned())])).unwrap();
        assert_eq!(
            std::fs::read_to_string(fixture.path().join("docs/a.txt")).unwrap(),
            "alpha\n"
        );
        let toolkit = eval_toolkit(fixture.path()).unwrap();
        let expected = [
            "current_time",
            "calculate",
            "list_files",
            "read_file",
            "search_files",
            "get_weather",
            "get_forecast",
            "convert_currency",
            "get_order_status",
            "track_shipment",
            "get_stock_price",
            "get_crypto_price",
        ];
        let schemas = toolkit.json_schemas();
        let names: Vec<&str> = schemas.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, expected);
        let weather = schemas.iter().find(|s| s.name == "get_weather").unwrap();
        assert_eq!(
            weather.parameters["properties"]["unit"]["enum"],
            serde_json::json!(["celsius", "fahrenheit", null]),
            "{}",
            weather.parameters
        );
        let order = schemas.iter().find(|s| s.name == "get_order_status").unwrap();
        assert_eq!(order.parameters["properties"]["order_id"]["type"], "integer");
        let dir = fixture.path().to_path_buf();
        drop(fixture);
        assert!(!dir.exists());
        let escape = BTreeMap::from([("../x".to_owned(), String::new())]);
        assert!(Fixture::create(&escape).is_err());
    }
}
