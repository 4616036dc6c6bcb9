//! Who calls the server: the users of a token file, and which sessions each may reach.
//!
//! A token file holds one `user:token` per line. A line without a colon is the server's own
//! token (the single token of a server without users), whose caller is the server's own user,
//! as every caller is without a token. Each session belongs to the user who made it; to any
//! other caller it does not exist (404 on every route), so nothing they send reaches it.

use std::sync::Arc;

use agentry_store::SessionInfo;
use subtle::ConstantTimeEq;

/// Who sent a request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Caller {
    /// The server's own user: a server without a token, its single token, or the line
    /// without a colon of its token file. Its sessions have no owner, as the terminal's do.
    Operator,
    /// A user of the token file.
    User(Arc<str>),
}

impl Caller {
    /// The owner the caller's sessions have ([`SessionInfo::owner`]).
    pub fn owner(&self) -> Option<&str> {
        match self {
            Caller::Operator => None,
            Caller::User(user) => Some(user),
        }
    }

    /// Whether `session` is the caller's.
    pub fn owns(&self, session: &SessionInfo) -> bool {
        self.owns_as(session.owner.as_deref())
    }

    /// Whether a session of owner `owner` is this caller's.
    pub fn owns_as(&self, owner: Option<&str>) -> bool {
        owner == self.owner()
    }
}

/// Why a token file is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenFileError {
    /// No line holds a token.
    #[error("the token file holds no token")]
    Empty,
    /// A line is not `user:token` or a token alone.
    #[error("line {line} of the token file: {problem}")]
    Line {
        /// The line's number, from 1.
        line: usize,
        /// What is wrong with it.
        problem: &'static str,
    },
}

/// The tokens a server accepts, each with its caller.
///
/// ```
/// use agentry_server::{Caller, TokenFile};
///
/// let tokens = TokenFile::parse("ada:s3cret-a\nbob:s3cret-b\n").unwrap();
/// assert_eq!(tokens.caller(b"s3cret-b"), Some(Caller::User("bob".into())));
/// assert_eq!(tokens.caller(b"guess"), None);
/// ```
#[derive(Clone)]
pub struct TokenFile {
    entries: Vec<(Box<[u8]>, Caller)>,
}

impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let callers: Vec<&Caller> = self.entries.iter().map(|(_, caller)| caller).collect();
        f.debug_struct("TokenFile").field("callers", &callers).finish()
    }
}

impl TokenFile {
    /// The tokens of a token file's text: `user:token` per line, or one line with a token
    /// alone for the server's own user; blank lines and lines starting with `#` are skipped.
    /// A user name is a word without spaces or control characters; a token is given once.
    pub fn parse(text: &str) -> Result<Self, TokenFileError> {
        let mut entries: Vec<(Box<[u8]>, Caller)> = Vec::new();
        for (at, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let problem = |problem| TokenFileError::Line {
                line: at + 1,
                problem,
            };
            let (caller, token) = match line.split_once(':') {
                Some((user, token)) => {
                    let user = user.trim();
                    if user.is_empty() || user.chars().any(|c| c.is_whitespace() || c.is_control()) {
                        return Err(problem("a user name is a word without spaces"));
                    }
                    (Caller::User(user.into()), token.trim())
                }
                None => {
                    if entries.iter().any(|(_, caller)| *caller == Caller::Operator) {
                        return Err(problem("only one line may hold a token without a user"));
                    }
                    (Caller::Operator, line)
                }
            };
            if token.is_empty() {
                return Err(problem("the token is empty"));
            }
            if entries.iter().any(|(known, _)| **known == *token.as_bytes()) {
                return Err(problem("this token is given on an earlier line"));
            }
            entries.push((token.as_bytes().into(), caller));
        }
        if entries.is_empty() {
            return Err(TokenFileError::Empty);
        }
        Ok(TokenFile { entries })
    }

    /// The server's single token, for its own user.
    pub fn single(token: &str) -> Self {
        TokenFile {
            entries: vec![(token.as_bytes().into(), Caller::Operator)],
        }
    }

    /// Whether a token is empty (which would accept an empty `Authorization` header).
    pub(crate) fn has_empty_token(&self) -> bool {
        self.entries.iter().any(|(token, _)| token.is_empty())
    }

    /// Whose `token` is. Every token is compared, in constant time, whatever matches: how
    /// long the answer takes tells nothing of the tokens.
    pub fn caller(&self, token: &[u8]) -> Option<Caller> {
        let mut found = None;
        for (known, caller) in &self.entries {
            // Lengths may differ: `ct_eq` on slices of different lengths is false.
            if bool::from(known.ct_eq(token)) {
                found = Some(caller.clone());
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_maps_each_token_to_its_user() {
        let tokens = TokenFile::parse("# team\nada:tok-a\n\n bob : tok-b \nops-token\n").unwrap();
        assert_eq!(tokens.caller(b"tok-a"), Some(Caller::User("ada".into())));
        assert_eq!(tokens.caller(b"tok-b"), Some(Caller::User("bob".into())));
        assert_eq!(tokens.caller(b"ops-token"), Some(Caller::Operator));
        assert_eq!(tokens.caller(b"tok-"), None);
        assert_eq!(tokens.caller(b""), None);
    }

    #[test]
    fn a_bad_token_file_says_which_line() {
        let error = |text: &str| TokenFile::parse(text).unwrap_err().to_string();
        assert_eq!(error("\n# none\n"), "the token file holds no token");
        assert!(error("ada:a\n:b").starts_with("line 2 of the token file: a user name"));
        assert!(error("ada:").contains("line 1") && error("ada:").contains("empty"));
        assert!(error("ada:x\nbob:x").contains("earlier line"));
        assert!(error("one\ntwo").contains("only one line"));
        assert!(error("a b:x").contains("without spaces"));
    }
}
