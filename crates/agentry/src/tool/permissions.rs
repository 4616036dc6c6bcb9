//! Permission rules: calls allowed or denied by the user's configuration, decided without asking
//! (spec A20). What no rule covers is asked as before, and declined when nobody can answer.
//!
//! A rule is `TOOL` (every call of the tool) or `TOOL:PATTERN`, where `TOOL` may hold `*` (any
//! characters) and `PATTERN` is a glob over one argument of the call:
//!
//! - `ARG=GLOB`: the argument `ARG` (a string, or a number or boolean as JSON text);
//! - `GLOB` alone: the argument the tool names for rules (its
//!   [`ToolOptions::rule_subject`](crate::tool::ToolOptions::rule_subject), e.g. `path` for the
//!   built-in file tools).
//!
//! In a glob `*` matches any characters but `/`, `**` any characters, `?` one character, and
//! `[abc]` one of a set. A value matches as written or read as a path (`.` components and
//! doubled slashes ignored). A value that climbs out with `..` is never allowed by a rule (the call is asked
//! about), and is denied when either it or its resolved form matches a deny rule. **Deny wins**:
//! a call that a deny rule matches is declined whatever else says (an allow rule, a session
//! grant, auto-approval), also for tools that need no approval.
//!
//! ```
//! use agentry::tool::{PermissionRules, RuleEffect};
//! use serde_json::json;
//!
//! let rules = PermissionRules::new()
//!     .allow("write_file:notes/**")?
//!     .deny("write_file:notes/private/**")?
//!     .allow("fetch:url=https://docs.rs/**")?;
//! let args = |v: serde_json::Value| v.as_object().cloned().unwrap();
//! let subject = Some("path");
//! let verdict = rules.verdict("write_file", subject, &args(json!({"path": "notes/a.md"})));
//! assert_eq!(verdict.map(|m| m.effect), Some(RuleEffect::Allow));
//! let verdict = rules.verdict("write_file", subject, &args(json!({"path": "notes/private/k"})));
//! assert_eq!(verdict.map(|m| m.effect), Some(RuleEffect::Deny));
//! let verdict = rules.verdict("write_file", subject, &args(json!({"path": "notes/../src/x"})));
//! assert_eq!(verdict, None, "climbing out is asked about");
//! # Ok::<(), agentry::tool::RuleError>(())
//! ```

use std::fmt;

use globset::{Glob, GlobBuilder, GlobMatcher};
use serde_json::{Map, Value};

/// Whether a rule allows or denies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleEffect {
    /// The call runs without asking (if it needs approval at all).
    Allow,
    /// The call is declined, without asking.
    Deny,
}

impl RuleEffect {
    fn word(self) -> &'static str {
        match self {
            RuleEffect::Allow => "allow",
            RuleEffect::Deny => "deny",
        }
    }
}

/// A rule that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the permission rule {rule:?} is not valid: {why}")]
pub struct RuleError {
    rule: String,
    why: String,
}

/// What a rule's pattern looks at.
#[derive(Debug, Clone)]
enum Target {
    /// Every call of the tool.
    Any,
    /// The tool's rule subject.
    Subject(GlobMatcher),
    /// A named argument.
    Argument(String, GlobMatcher),
}

/// One rule, as written (`write_file:notes/**`).
#[derive(Debug, Clone)]
pub struct PermissionRule {
    effect: RuleEffect,
    text: String,
    tool: GlobMatcher,
    target: Target,
}

impl PermissionRule {
    /// Parses `TOOL[:PATTERN]`.
    pub fn parse(effect: RuleEffect, text: &str) -> Result<Self, RuleError> {
        let error = |why: &str| RuleError {
            rule: text.to_owned(),
            why: why.to_owned(),
        };
        let (tool, pattern) = match text.split_once(':') {
            Some((tool, pattern)) => (tool.trim(), Some(pattern)),
            None => (text.trim(), None),
        };
        if tool.is_empty() {
            return Err(error("it names no tool (TOOL or TOOL:PATTERN)"));
        }
        // Tool names hold no separators: `*` matches any characters of them.
        let tool = Glob::new(tool)
            .map_err(|e| error(&e.kind().to_string()))?
            .compile_matcher();
        let target = match pattern {
            None => Target::Any,
            Some("") => return Err(error("the pattern after ':' is empty")),
            Some(pattern) => match pattern.split_once('=') {
                Some((argument, glob)) if is_argument_name(argument) => {
                    Target::Argument(argument.to_owned(), value_glob(glob).map_err(|e| error(&e))?)
                }
                _ => Target::Subject(value_glob(pattern).map_err(|e| error(&e))?),
            },
        };
        Ok(PermissionRule {
            effect,
            text: text.to_owned(),
            tool,
            target,
        })
    }

    /// Allows or denies.
    pub fn effect(&self) -> RuleEffect {
        self.effect
    }

    /// The rule as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the rule looks at the tool's rule subject (a pattern without `ARG=`).
    pub fn needs_subject(&self) -> bool {
        matches!(self.target, Target::Subject(_))
    }

    /// Whether the rule is about the tool `name` (its pattern aside).
    pub fn names_tool(&self, name: &str) -> bool {
        self.tool.is_match(name)
    }

    /// Whether the rule covers a call of `tool` with `args`; `subject` is the argument the tool
    /// names for rules.
    fn covers(&self, tool: &str, subject: Option<&str>, args: &Map<String, Value>) -> bool {
        if !self.tool.is_match(tool) {
            return false;
        }
        let (argument, glob) = match &self.target {
            Target::Any => return true,
            Target::Subject(glob) => match subject {
                Some(subject) => (subject, glob),
                // A pattern over an argument the tool does not name: no call is covered.
                None => return false,
            },
            Target::Argument(argument, glob) => (argument.as_str(), glob),
        };
        let Some(value) = args.get(argument) else {
            return false;
        };
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Number(_) | Value::Bool(_) => value.to_string(),
            _ => return false,
        };
        let path = PathValue::read(&text);
        match self.effect {
            // Never allowed by a rule once it climbs out (the call is asked about instead).
            // As written or tidied (a URL keeps its `//`).
            RuleEffect::Allow => !path.climbs && (glob.is_match(&path.tidy) || glob.is_match(&text)),
            RuleEffect::Deny => {
                glob.is_match(&path.tidy) || glob.is_match(&path.resolved) || glob.is_match(&text)
            }
        }
    }
}

impl fmt::Display for PermissionRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.effect.word(), self.text)
    }
}

/// A rule that decided a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleMatch {
    /// Allowed or denied.
    pub effect: RuleEffect,
    /// The rule, as `allow TOOL:PATTERN` / `deny TOOL:PATTERN`.
    pub rule: String,
}

/// The allow and deny rules of an agent (spec A20). Empty by default: everything that needs
/// approval is asked.
#[derive(Debug, Clone, Default)]
pub struct PermissionRules {
    rules: Vec<PermissionRule>,
}

impl PermissionRules {
    /// No rules.
    pub fn new() -> Self {
        Self::default()
    }

    /// With an allow rule `TOOL[:PATTERN]`.
    pub fn allow(mut self, rule: &str) -> Result<Self, RuleError> {
        self.rules.push(PermissionRule::parse(RuleEffect::Allow, rule)?);
        Ok(self)
    }

    /// With a deny rule `TOOL[:PATTERN]`.
    pub fn deny(mut self, rule: &str) -> Result<Self, RuleError> {
        self.rules.push(PermissionRule::parse(RuleEffect::Deny, rule)?);
        Ok(self)
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules, in the order they were added.
    pub fn rules(&self) -> &[PermissionRule] {
        &self.rules
    }

    /// What the rules say of a call of `tool` with `args` (`subject`: the argument the tool
    /// names for rules): the first deny rule that covers it, else the first allow rule, else
    /// nothing (ask).
    pub fn verdict(&self, tool: &str, subject: Option<&str>, args: &Map<String, Value>) -> Option<RuleMatch> {
        let first = |effect: RuleEffect| {
            self.rules
                .iter()
                .find(|r| r.effect == effect && r.covers(tool, subject, args))
                .map(|r| RuleMatch {
                    effect,
                    rule: r.to_string(),
                })
        };
        first(RuleEffect::Deny).or_else(|| first(RuleEffect::Allow))
    }
}

/// `ARG` in `ARG=GLOB`: a plain identifier, so that a glob holding `=` stays a glob.
fn is_argument_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

/// A glob over an argument's value: `*` stops at `/`, `**` does not.
fn value_glob(glob: &str) -> Result<GlobMatcher, String> {
    let glob = glob.trim();
    if glob.is_empty() {
        return Err("the pattern is empty".into());
    }
    GlobBuilder::new(glob)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| e.kind().to_string())
}

/// An argument's value read as a path.
struct PathValue {
    /// Without `.` components and doubled slashes.
    tidy: String,
    /// With `..` components resolved against what precedes them.
    resolved: String,
    /// Whether it has a `..` component.
    climbs: bool,
}

impl PathValue {
    fn read(text: &str) -> Self {
        let absolute = text.starts_with('/');
        let parts: Vec<&str> = text.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
        let climbs = parts.contains(&"..");
        let mut resolved: Vec<&str> = Vec::new();
        for part in &parts {
            if *part == ".." {
                if resolved.last().is_some_and(|last| *last != "..") {
                    resolved.pop();
                } else if !absolute {
                    resolved.push("..");
                }
            } else {
                resolved.push(part);
            }
        }
        let join = |parts: &[&str]| {
            let joined = parts.join("/");
            if absolute { format!("/{joined}") } else { joined }
        };
        PathValue {
            tidy: join(&parts),
            resolved: join(&resolved),
            climbs,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    fn effect(
        rules: &PermissionRules,
        tool: &str,
        subject: Option<&str>,
        value: Value,
    ) -> Option<RuleEffect> {
        rules.verdict(tool, subject, &args(value)).map(|m| m.effect)
    }

    #[test]
    fn a20_a_tool_alone_covers_every_call_and_a_glob_covers_tool_names() -> Result<(), RuleError> {
        let rules = PermissionRules::new().allow("calculate")?.deny("github_*")?;
        assert_eq!(
            effect(&rules, "calculate", None, json!({})),
            Some(RuleEffect::Allow)
        );
        assert_eq!(
            effect(&rules, "github_push", None, json!({})),
            Some(RuleEffect::Deny)
        );
        assert_eq!(effect(&rules, "read_file", None, json!({})), None);
        Ok(())
    }

    #[test]
    fn a20_a_pattern_matches_the_subject_or_a_named_argument() -> Result<(), RuleError> {
        let rules = PermissionRules::new()
            .allow("write_file:notes/*.md")?
            .allow("fetch:url=https://docs.rs/**")?
            .allow("scale:factor=2")?;
        let path = Some("path");
        assert_eq!(
            effect(&rules, "write_file", path, json!({"path": "notes/a.md"})),
            Some(RuleEffect::Allow)
        );
        assert_eq!(
            effect(&rules, "write_file", path, json!({"path": "./notes//a.md"})),
            Some(RuleEffect::Allow)
        );
        assert_eq!(
            effect(&rules, "write_file", path, json!({"path": "notes/sub/a.md"})),
            None,
            "* stops at /"
        );
        assert_eq!(
            effect(&rules, "write_file", path, json!({"path": "notes/a.txt"})),
            None
        );
        assert_eq!(
            effect(&rules, "write_file", None, json!({"path": "notes/a.md"})),
            None,
            "no subject"
        );
        assert_eq!(
            effect(&rules, "write_file", path, json!({"content": "notes/a.md"})),
            None
        );
        assert_eq!(
            effect(&rules, "fetch", None, json!({"url": "https://docs.rs/x/y"})),
            Some(RuleEffect::Allow)
        );
        assert_eq!(
            effect(
                &rules,
                "fetch",
                None,
                json!({"url": "https://evil.example/docs.rs/"})
            ),
            None
        );
        assert_eq!(
            effect(&rules, "scale", None, json!({"factor": 2})),
            Some(RuleEffect::Allow)
        );
        assert_eq!(effect(&rules, "scale", None, json!({"factor": 3})), None);
        Ok(())
    }

    #[test]
    fn a20_deny_wins_and_climbing_out_is_never_allowed_but_is_denied() -> Result<(), RuleError> {
        let rules = PermissionRules::new()
            .allow("write_file:**")?
            .deny("write_file:secrets/**")?;
        let path = Some("path");
        assert_eq!(
            effect(&rules, "write_file", path, json!({"path": "a/b"})),
            Some(RuleEffect::Allow)
        );
        assert_eq!(
            effect(&rules, "write_file", path, json!({"path": "secrets/k"})),
            Some(RuleEffect::Deny)
        );
        assert_eq!(
            effect(&rules, "write_file", path, json!({"path": "notes/../secrets/k"})),
            Some(RuleEffect::Deny),
            "the resolved form is denied"
        );
        assert_eq!(
            effect(&rules, "write_file", path, json!({"path": "notes/../other"})),
            None,
            "asked"
        );
        assert_eq!(
            effect(&rules, "write_file", path, json!({"path": "../outside"})),
            None,
            "asked"
        );
        let verdict = rules.verdict("write_file", path, &args(json!({"path": "secrets/k"})));
        assert_eq!(
            verdict.map(|m| m.rule).as_deref(),
            Some("deny write_file:secrets/**")
        );
        Ok(())
    }

    #[test]
    fn bad_rules_are_refused_with_the_rule_named() {
        for rule in ["", ":x", "write_file:", "write_file:[", "write_file:path=["] {
            let error = PermissionRules::new().allow(rule).err();
            assert!(error.is_some(), "{rule:?}");
            assert!(
                error
                    .map(|e| e.to_string())
                    .unwrap_or_default()
                    .contains("is not valid")
            );
        }
    }
}
