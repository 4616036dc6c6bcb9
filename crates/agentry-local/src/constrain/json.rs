//! A character-by-character acceptor for one JSON value of a known shape: it says whether
//! text can still become such a value. Used to reject, token by token, what would make a
//! tool call invalid: a tool name that is not offered, a key the schema does not have, a
//! string where a number goes, a value outside an enum.

use std::sync::Arc;

use serde_json::Value;

/// Whitespace characters allowed in a row outside strings: enough for any layout, too few
/// for a model to loop on spaces.
const MAX_SPACES: u8 = 8;

/// What a JSON value must look like.
#[derive(Debug, Clone)]
pub(crate) enum Shape {
    /// Any JSON value.
    Any,
    /// An object with these properties.
    Object(Arc<ObjectShape>),
    /// A string; with choices, exactly one of them.
    String(Option<Arc<Vec<String>>>),
    /// A number; an integer when `integer`.
    Number {
        integer: bool,
    },
    Boolean,
    Null,
    /// An array of items of one shape; with a number, at most that many.
    Array(Arc<Shape>, Option<usize>),
    /// A tool call: `{"name": <one of the tools>, "arguments": <that tool's object>}`.
    Call(Arc<Vec<(String, Shape)>>),
    /// A string quoted from this text: a part of it, at least two characters, no escapes.
    Quote(Arc<String>),
}

/// The properties of an object shape.
#[derive(Debug, Clone)]
pub(crate) struct ObjectShape {
    properties: Vec<(String, Shape)>,
    required: Vec<String>,
    /// Keys other than the properties are allowed.
    open: bool,
    /// The properties come in their order (all of them).
    ordered: bool,
}

impl Shape {
    /// The shape a JSON schema describes, as far as it can be checked while writing;
    /// anything this does not model (`anyOf`, `$ref`, type lists) is [`Shape::Any`].
    pub(crate) fn from_schema(schema: &Value) -> Shape {
        if let Some(choices) = schema.get("enum").and_then(Value::as_array) {
            let strings: Option<Vec<String>> =
                choices.iter().map(|c| c.as_str().map(str::to_owned)).collect();
            return match strings {
                Some(strings) if !strings.is_empty() => Shape::String(Some(Arc::new(strings))),
                _ => Shape::Any,
            };
        }
        if let Some(constant) = schema.get("const") {
            return match constant.as_str() {
                Some(s) => Shape::String(Some(Arc::new(vec![s.to_owned()]))),
                None => Shape::Any,
            };
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("object") => {
                let properties: Vec<(String, Shape)> = schema
                    .get("properties")
                    .and_then(Value::as_object)
                    .map(|props| {
                        props
                            .iter()
                            .map(|(name, s)| (name.clone(), Shape::from_schema(s)))
                            .collect()
                    })
                    .unwrap_or_default();
                let required = schema
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
                    .unwrap_or_default();
                // Without declared properties any key goes; with them, only those (a small
                // model's invented keys are what this is here to stop).
                let open = properties.is_empty();
                Shape::Object(Arc::new(ObjectShape {
                    properties,
                    required,
                    open,
                    ordered: false,
                }))
            }
            Some("string") => Shape::String(None),
            Some("integer") => Shape::Number { integer: true },
            Some("number") => Shape::Number { integer: false },
            Some("boolean") => Shape::Boolean,
            Some("null") => Shape::Null,
            Some("array") => Shape::Array(
                Arc::new(schema.get("items").map(Shape::from_schema).unwrap_or(Shape::Any)),
                schema
                    .get("maxItems")
                    .and_then(Value::as_u64)
                    .map(|most| most as usize),
            ),
            _ => Shape::Any,
        }
    }

    /// A call of one of these tools, each given by its name and parameters schema.
    pub(crate) fn call<'a>(tools: impl IntoIterator<Item = (&'a str, &'a Value)>) -> Shape {
        let tools = tools
            .into_iter()
            .map(|(name, parameters)| {
                let shape = match Shape::from_schema(parameters) {
                    object @ Shape::Object(_) => object,
                    _ => Shape::Object(Arc::new(ObjectShape {
                        properties: Vec::new(),
                        required: Vec::new(),
                        open: true,
                        ordered: false,
                    })),
                };
                (name.to_owned(), shape)
            })
            .collect();
        Shape::Call(Arc::new(tools))
    }

    /// A plan: a list of at most `most_parts` `{"part": <quoted from question>, "tool": <a
    /// name or "none">}`, the part written first.
    pub(crate) fn plan<'a>(
        question: &str,
        tools: impl IntoIterator<Item = &'a str>,
        most_parts: usize,
    ) -> Shape {
        let mut names: Vec<String> = tools.into_iter().map(str::to_owned).collect();
        names.push(NO_TOOL.to_owned());
        let step = ObjectShape {
            properties: vec![
                ("part".to_owned(), Shape::Quote(Arc::new(question.to_owned()))),
                ("tool".to_owned(), Shape::String(Some(Arc::new(names)))),
            ],
            required: vec!["part".to_owned(), "tool".to_owned()],
            open: false,
            ordered: true,
        };
        Shape::Array(Arc::new(Shape::Object(Arc::new(step))), Some(most_parts))
    }
}

/// The tool of a planned part that needs none.
pub(crate) const NO_TOOL: &str = "none";

/// An object being written: which kind, which keys are used, what comes next.
#[derive(Debug, Clone)]
enum ObjectKind {
    Shaped(Arc<ObjectShape>),
    Any,
    /// A call; `name` once its name is written.
    Call {
        tools: Arc<Vec<(String, Shape)>>,
        name: Option<usize>,
    },
}

#[derive(Debug, Clone, PartialEq)]
enum ObjectPhase {
    /// After `{`: a key or `}`.
    First,
    /// After `,`: a key.
    Key,
    /// After a key: `:`.
    Colon(String),
    /// After a value: `,` or `}`.
    Next,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum StringRole {
    Key,
    Value,
}

#[derive(Debug, Clone)]
enum Frame {
    /// A value of this shape comes next (whitespace first is fine).
    Value(Shape),
    Object {
        kind: ObjectKind,
        used: Vec<String>,
        phase: ObjectPhase,
        /// The key whose value is being written.
        pending: Option<String>,
    },
    Array {
        item: Shape,
        /// True once an item has been written (then `,` or `]`).
        after_item: bool,
        /// True right after `[` (then `]` is fine too).
        empty: bool,
        /// How many more items may come, when the shape bounds them.
        room: Option<usize>,
    },
    Str {
        text: String,
        /// Inside an escape: the characters still expected (`\u` takes four).
        escape: u8,
        choices: Option<Arc<Vec<String>>>,
        /// The text the string must be quoted from.
        within: Option<Arc<String>>,
        role: StringRole,
    },
    Number {
        text: String,
        integer: bool,
    },
    Literal {
        rest: &'static str,
    },
}

impl Frame {
    /// An object just opened.
    fn object(kind: ObjectKind) -> Frame {
        Frame::Object {
            kind,
            used: Vec::new(),
            phase: ObjectPhase::First,
            pending: None,
        }
    }

    /// An array just opened.
    fn array(item: Shape, most: Option<usize>) -> Frame {
        Frame::Array {
            item,
            after_item: false,
            empty: true,
            room: most,
        }
    }

    /// A string just opened.
    fn string(choices: Option<Arc<Vec<String>>>, role: StringRole) -> Frame {
        Frame::Str {
            text: String::new(),
            escape: 0,
            choices,
            within: None,
            role,
        }
    }
}

/// Whether text can still become a value of the shape it was made for.
#[derive(Debug, Clone)]
pub(crate) struct Acceptor {
    stack: Vec<Frame>,
    spaces: u8,
}

impl Acceptor {
    pub(crate) fn new(shape: Shape) -> Acceptor {
        Acceptor {
            stack: vec![Frame::Value(shape)],
            spaces: 0,
        }
    }

    /// True once the value is complete: nothing more belongs to it.
    pub(crate) fn is_complete(&self) -> bool {
        self.stack.is_empty()
    }

    /// Feeds characters until the value is complete; returns how many were taken, or None if
    /// one of them cannot belong to the value.
    pub(crate) fn feed_str(&mut self, text: &str) -> Option<usize> {
        for (i, c) in text.char_indices() {
            if self.is_complete() {
                return Some(i);
            }
            if !self.feed(c) {
                return None;
            }
        }
        Some(text.len())
    }

    /// Feeds one character; false if it cannot belong to the value (the state is then
    /// unspecified: feed a clone when testing a candidate).
    pub(crate) fn feed(&mut self, c: char) -> bool {
        loop {
            let Some(top) = self.stack.last_mut() else {
                return false;
            };
            match top {
                Frame::Value(_) => {
                    if c.is_whitespace() {
                        return self.space();
                    }
                    let Some(Frame::Value(shape)) = self.stack.pop() else {
                        return false;
                    };
                    self.spaces = 0;
                    return self.start_value(shape, c);
                }
                Frame::Str { .. } => return self.string_char(c),
                Frame::Number { text, integer } => {
                    let mut longer = text.clone();
                    longer.push(c);
                    if number_prefix(&longer, *integer) {
                        *text = longer;
                        return true;
                    }
                    if !number_complete(text, *integer) {
                        return false;
                    }
                    // The number ends here; the character belongs to what contains it.
                    self.stack.pop();
                    continue;
                }
                Frame::Literal { rest } => {
                    let mut chars = rest.chars();
                    if chars.next() != Some(c) {
                        return false;
                    }
                    *rest = chars.as_str();
                    if rest.is_empty() {
                        self.stack.pop();
                    }
                    return true;
                }
                Frame::Array {
                    item,
                    after_item,
                    empty,
                    room,
                } => {
                    if c.is_whitespace() {
                        return self.space();
                    }
                    self.spaces = 0;
                    if c == ']' && (*after_item || *empty) {
                        self.stack.pop();
                        return true;
                    }
                    // Another item: only while there is room for one.
                    match room {
                        Some(0) => return false,
                        Some(left) => *left -= 1,
                        None => {}
                    }
                    if *after_item {
                        if c != ',' {
                            return false;
                        }
                        // The next item comes first; after it, `,` or `]` again.
                        *empty = false;
                        let item = item.clone();
                        self.stack.push(Frame::Value(item));
                        return true;
                    }
                    // The first item starts with this character.
                    *after_item = true;
                    *empty = false;
                    let item = item.clone();
                    self.stack.push(Frame::Value(item));
                    continue;
                }
                Frame::Object { .. } => return self.object_char(c),
            }
        }
    }

    fn space(&mut self) -> bool {
        self.spaces += 1;
        self.spaces <= MAX_SPACES
    }

    fn start_value(&mut self, shape: Shape, c: char) -> bool {
        let frame = match (&shape, c) {
            (Shape::Object(object), '{') => Frame::object(ObjectKind::Shaped(object.clone())),
            (Shape::Call(tools), '{') => Frame::object(ObjectKind::Call {
                tools: tools.clone(),
                name: None,
            }),
            (Shape::Any, '{') => Frame::object(ObjectKind::Any),
            (Shape::Array(item, most), '[') => Frame::array((**item).clone(), *most),
            (Shape::Any, '[') => Frame::array(Shape::Any, None),
            (Shape::String(choices), '"') => Frame::string(choices.clone(), StringRole::Value),
            (Shape::Any, '"') => Frame::string(None, StringRole::Value),
            (Shape::Quote(within), '"') => Frame::Str {
                text: String::new(),
                escape: 0,
                choices: None,
                within: Some(within.clone()),
                role: StringRole::Value,
            },
            (Shape::Number { integer }, c) if c == '-' || c.is_ascii_digit() => Frame::Number {
                text: c.to_string(),
                integer: *integer,
            },
            (Shape::Any, c) if c == '-' || c.is_ascii_digit() => Frame::Number {
                text: c.to_string(),
                integer: false,
            },
            (Shape::Boolean | Shape::Any, 't') => Frame::Literal { rest: "rue" },
            (Shape::Boolean | Shape::Any, 'f') => Frame::Literal { rest: "alse" },
            (Shape::Null | Shape::Any, 'n') => Frame::Literal { rest: "ull" },
            _ => return false,
        };
        self.stack.push(frame);
        true
    }

    fn string_char(&mut self, c: char) -> bool {
        let Some(Frame::Str {
            text,
            escape,
            choices,
            within,
            role,
        }) = self.stack.last_mut()
        else {
            return false;
        };
        if let Some(within) = within {
            return match c {
                '"' if text.chars().count() >= 2 && within.contains(text.as_str()) => {
                    let (text, role) = (std::mem::take(text), *role);
                    self.stack.pop();
                    self.string_done(text, role)
                }
                '"' | '\\' => false,
                c => {
                    text.push(c);
                    within.contains(text.as_str())
                }
            };
        }
        if *escape > 0 {
            let ok = if *escape == 5 {
                // The character after the backslash.
                match c {
                    'u' => {
                        *escape = 4;
                        return choices.is_none();
                    }
                    '"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't' => true,
                    _ => false,
                }
            } else {
                c.is_ascii_hexdigit()
            };
            if !ok {
                return false;
            }
            *escape = if *escape == 5 { 0 } else { *escape - 1 };
            text.push('\u{FFFD}');
            return choices.is_none();
        }
        match c {
            '"' => {
                if let Some(choices) = choices
                    && !choices.iter().any(|choice| choice == text)
                {
                    return false;
                }
                let (text, role) = (std::mem::take(text), *role);
                self.stack.pop();
                self.string_done(text, role)
            }
            '\\' => {
                *escape = 5;
                // Choices are plain names: no escapes in them.
                choices.is_none()
            }
            c if (c as u32) < 0x20 => false,
            c => {
                text.push(c);
                match choices {
                    Some(choices) => choices.iter().any(|choice| choice.starts_with(text.as_str())),
                    None => true,
                }
            }
        }
    }

    /// A string ended: a key moves its object on; a call's name picks the arguments' shape.
    fn string_done(&mut self, text: String, role: StringRole) -> bool {
        let Some(Frame::Object {
            kind,
            used,
            phase,
            pending,
        }) = self.stack.last_mut()
        else {
            // A string at the top level or in an array.
            return true;
        };
        match role {
            StringRole::Key => {
                used.push(text.clone());
                *phase = ObjectPhase::Colon(text);
            }
            StringRole::Value => {
                if let ObjectKind::Call { tools, name } = kind
                    && pending.as_deref() == Some("name")
                {
                    *name = tools.iter().position(|(tool, _)| *tool == text);
                }
            }
        }
        true
    }

    fn object_char(&mut self, c: char) -> bool {
        let Some(Frame::Object {
            kind,
            used,
            phase,
            pending,
        }) = self.stack.last_mut()
        else {
            return false;
        };
        if c.is_whitespace() {
            return self.space();
        }
        self.spaces = 0;
        match phase.clone() {
            ObjectPhase::First | ObjectPhase::Key => {
                if c == '}' && *phase == ObjectPhase::First && missing_required(kind, used) == 0 {
                    self.stack.pop();
                    return true;
                }
                if c != '"' {
                    return false;
                }
                let choices = key_choices(kind, used);
                if matches!(&choices, Some(keys) if keys.is_empty()) {
                    return false;
                }
                self.stack
                    .push(Frame::string(choices.map(Arc::new), StringRole::Key));
                true
            }
            ObjectPhase::Colon(key) => {
                if c != ':' {
                    return false;
                }
                let shape = value_shape(kind, &key);
                *phase = ObjectPhase::Next;
                *pending = Some(key);
                self.stack.push(Frame::Value(shape));
                true
            }
            ObjectPhase::Next => match c {
                ',' => {
                    if matches!(key_choices(kind, used), Some(keys) if keys.is_empty()) {
                        return false;
                    }
                    *phase = ObjectPhase::Key;
                    *pending = None;
                    true
                }
                '}' if missing_required(kind, used) == 0 => {
                    self.stack.pop();
                    true
                }
                _ => false,
            },
        }
    }
}

/// The keys that may come next in an object (None: any key).
fn key_choices(kind: &ObjectKind, used: &[String]) -> Option<Vec<String>> {
    match kind {
        ObjectKind::Any => None,
        ObjectKind::Shaped(shape) if shape.open => None,
        ObjectKind::Shaped(shape) if shape.ordered => Some(
            shape
                .properties
                .iter()
                .map(|(name, _)| name.clone())
                .find(|name| !used.contains(name))
                .into_iter()
                .collect(),
        ),
        ObjectKind::Shaped(shape) => Some(
            shape
                .properties
                .iter()
                .map(|(name, _)| name.clone())
                .filter(|name| !used.contains(name))
                .collect(),
        ),
        // The name first, then the arguments.
        ObjectKind::Call { .. } => Some(match used.len() {
            0 => vec!["name".to_owned()],
            1 => vec!["arguments".to_owned()],
            _ => Vec::new(),
        }),
    }
}

fn value_shape(kind: &ObjectKind, key: &str) -> Shape {
    match kind {
        ObjectKind::Any => Shape::Any,
        ObjectKind::Shaped(shape) => shape
            .properties
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, shape)| shape.clone())
            .unwrap_or(Shape::Any),
        ObjectKind::Call { tools, name } => match (key, name) {
            ("name", _) => Shape::String(Some(Arc::new(
                tools.iter().map(|(tool, _)| tool.clone()).collect(),
            ))),
            ("arguments", Some(index)) => tools
                .get(*index)
                .map(|(_, shape)| shape.clone())
                .unwrap_or(Shape::Any),
            _ => Shape::Any,
        },
    }
}

fn missing_required(kind: &ObjectKind, used: &[String]) -> usize {
    match kind {
        ObjectKind::Any => 0,
        ObjectKind::Shaped(shape) => shape.required.iter().filter(|r| !used.contains(r)).count(),
        ObjectKind::Call { .. } => 2usize.saturating_sub(used.len()),
    }
}

/// Whether `text` can still grow into a JSON number (an integer when `integer`).
fn number_prefix(text: &str, integer: bool) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() {
        return true;
    }
    let (int, rest) = split_digits(digits);
    if int.is_empty() || (int.len() > 1 && int.starts_with('0')) {
        return false;
    }
    if rest.is_empty() {
        return true;
    }
    if integer {
        return false;
    }
    let rest = match rest.strip_prefix('.') {
        Some(fraction) => {
            let (digits, after) = split_digits(fraction);
            if after.is_empty() {
                return true;
            }
            if digits.is_empty() {
                return false;
            }
            after
        }
        None => rest,
    };
    let Some(exponent) = rest.strip_prefix(['e', 'E']) else {
        return false;
    };
    let exponent = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
    exponent.chars().all(|c| c.is_ascii_digit())
}

/// Whether `text` is a whole JSON number.
fn number_complete(text: &str, integer: bool) -> bool {
    number_prefix(text, integer) && text.ends_with(|c: char| c.is_ascii_digit())
}

fn split_digits(text: &str) -> (&str, &str) {
    let end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    text.split_at(end)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tools() -> Shape {
        let weather = json!({"type": "object", "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer"}}, "required": ["city"]});
        let calc = json!({"type": "object", "properties": {"expression": {"type": "string"}},
            "required": ["expression"]});
        Shape::call([("get_weather", &weather), ("calculate", &calc)])
    }

    fn accepts(shape: Shape, text: &str) -> bool {
        let mut acceptor = Acceptor::new(shape);
        acceptor.feed_str(text) == Some(text.len())
    }

    fn complete(shape: Shape, text: &str) -> bool {
        let mut acceptor = Acceptor::new(shape);
        acceptor.feed_str(text) == Some(text.len()) && acceptor.is_complete()
    }

    #[test]
    fn a_plan_quotes_its_parts_from_the_question_and_names_offered_tools() {
        let plan = || {
            Shape::plan(
                "What is 2*3, and what time is it?",
                ["calculate", "current_time"],
                2,
            )
        };
        assert!(complete(
            plan(),
            r#"[{"part": "2*3", "tool": "calculate"}, {"part": "what time is it", "tool": "current_time"}]"#
        ));
        assert!(complete(plan(), r#"[{"part": "What is", "tool": "none"}]"#));
        assert!(complete(plan(), "[]"));
        assert!(
            !accepts(plan(), r#"[{"part": "the weather"#),
            "not in the question"
        );
        assert!(!accepts(plan(), r#"[{"part": "W""#), "too short to say anything");
        assert!(!accepts(plan(), r#"[{"tool": "#), "the part comes first");
        assert!(
            !accepts(plan(), r#"[{"part": "2*3", "tool": "write_file""#),
            "not offered"
        );
    }

    #[test]
    fn a_valid_call_is_accepted_whole() {
        assert!(complete(
            tools(),
            r#"{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "days": 3}}"#
        ));
        assert!(complete(
            tools(),
            "{\n  \"name\":\"calculate\",\n  \"arguments\": {\"expression\": \"2*(3+4)\"}\n}"
        ));
    }

    #[test]
    fn an_invalid_call_is_rejected_where_it_goes_wrong() {
        // A tool that is not offered.
        assert!(!accepts(tools(), r#"{"name": "get_time"#));
        assert!(accepts(tools(), r#"{"name": "get_w"#));
        // Keys out of order, or invented.
        assert!(!accepts(tools(), r#"{"arguments"#));
        assert!(!accepts(
            tools(),
            r#"{"name": "calculate", "arguments": {"expr":"#
        ));
        // Arguments as a string.
        assert!(!accepts(tools(), r#"{"name": "calculate", "arguments": ""#));
        // A value outside the enum, a string where an integer goes, a fraction in an integer.
        assert!(!accepts(
            tools(),
            r#"{"name": "get_weather", "arguments": {"city": "Rome", "unit": "kelvin"#
        ));
        assert!(!accepts(
            tools(),
            r#"{"name": "get_weather", "arguments": {"city": "Rome", "days": "3"#
        ));
        assert!(!accepts(
            tools(),
            r#"{"name": "get_weather", "arguments": {"city": "Rome", "days": 3.5"#
        ));
        // A required argument missing.
        assert!(!accepts(
            tools(),
            r#"{"name": "get_weather", "arguments": {"days": 2}"#
        ));
        // Nothing after the end.
        let mut acceptor = Acceptor::new(tools());
        let text = r#"{"name": "calculate", "arguments": {"expression": "1"}}"#;
        assert_eq!(
            acceptor.feed_str(&format!("{text}\n</tool_call>")),
            Some(text.len())
        );
        assert!(acceptor.is_complete());
    }

    #[test]
    fn numbers_and_literals_follow_json() {
        let number = || Shape::Number { integer: false };
        assert!(complete(number(), "-12.5e+3 ") || accepts(number(), "-12.5e+3"));
        assert!(!accepts(number(), "01"));
        assert!(!accepts(number(), "1..2"));
        assert!(accepts(Shape::Boolean, "fal"));
        assert!(!accepts(Shape::Boolean, "nul"));
        assert!(complete(Shape::Any, r#"[1, "a", {"b": null}, [true]]"#));
        assert!(!accepts(Shape::Any, "[1,,"));
    }

    #[test]
    fn endless_whitespace_is_refused() {
        assert!(accepts(tools(), "{\n    \"name\""));
        assert!(!accepts(tools(), &format!("{{{}", " ".repeat(20))));
    }

    #[test]
    fn escapes_and_control_characters_in_strings() {
        assert!(complete(Shape::String(None), r#""a\"b\u00e9""#));
        assert!(!accepts(Shape::String(None), "\"a\u{1}"));
        assert!(!accepts(Shape::String(None), r#""\x"#));
    }
}
