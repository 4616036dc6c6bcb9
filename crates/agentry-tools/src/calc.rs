//! `calculate`: exact, safe arithmetic for the model (no eval, no I/O).
//!
//! A small recursive-descent parser over `f64`:
//!
//! ```text
//! expr    := term (('+' | '-') term)*
//! term    := unary (('*' | '/' | '%') unary)*
//! unary   := ('-' | '+') unary | power          -2^2 = -4
//! power   := primary ('^' unary)?               right-associative: 2^3^2 = 2^9
//! primary := number | constant | name '(' expr (',' expr)* ')' | '(' expr ')'
//! ```
//!
//! Every error names the 1-based character position it happened at and what was expected.

/// Longest expression accepted, in characters.
pub const MAX_LEN: usize = 1000;
/// Deepest nesting accepted: parentheses, function calls, signs and exponents each add a level.
pub const MAX_DEPTH: usize = 100;

const FUNCTIONS: [&str; 12] = [
    "sqrt", "abs", "round", "floor", "ceil", "ln", "log10", "sin", "cos", "tan", "min", "max",
];

/// Evaluates an arithmetic expression; errors say where and what was expected.
pub fn evaluate(expression: &str) -> Result<f64, String> {
    let length = expression.chars().count();
    if length > MAX_LEN {
        return Err(format!(
            "the expression is {length} characters long; at most {MAX_LEN} are accepted"
        ));
    }
    let mut parser = Parser {
        chars: expression.chars().collect(),
        pos: 0,
        depth: 0,
    };
    parser.skip_space();
    if parser.at_end() {
        return Err("the expression is empty; expected a number, a function or '('".into());
    }
    let value = parser.expr()?;
    parser.skip_space();
    if let Some(c) = parser.peek() {
        let hint = if c == ')' {
            " (this ')' has no matching '(')"
        } else {
            ""
        };
        return Err(parser.error(&format!(
            "unexpected {c:?}{hint}; expected an operator (+ - * / % ^) or the end of the expression"
        )));
    }
    // Every step is checked already; this only guards the invariant.
    finite(value, 0, || "the result".to_owned())
}

/// The result as text: `4` rather than `4.0` for integral values below 1e15, scientific
/// notation (`1e20`, `1.5e-7`) for very large or very small ones, the shortest form that
/// reads back as the same `f64` otherwise.
pub fn format_number(value: f64) -> String {
    if value == 0.0 {
        // Also turns -0 into 0.
        return "0".to_owned();
    }
    let magnitude = value.abs();
    if !(1e-6..1e15).contains(&magnitude) {
        format!("{value:e}")
    } else if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        value.to_string()
    }
}

/// `value` if it is a finite number; otherwise an error at `pos` (0-based) about `what`.
fn finite(value: f64, pos: usize, what: impl FnOnce() -> String) -> Result<f64, String> {
    if value.is_nan() {
        Err(format!(
            "at position {}: {} is undefined (not a real number)",
            pos + 1,
            what()
        ))
    } else if value.is_infinite() {
        Err(format!(
            "at position {}: {} is infinite or too large for a 64-bit float",
            pos + 1,
            what()
        ))
    } else {
        Ok(value)
    }
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn at_end(&self) -> bool {
        self.pos >= self.chars.len()
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    fn error(&self, what: &str) -> String {
        format!("at position {}: {what}", self.pos + 1)
    }

    /// Consumes `c` (after spaces) and returns its 0-based position.
    fn eat(&mut self, c: char) -> Option<usize> {
        self.skip_space();
        if self.peek() == Some(c) {
            self.pos += 1;
            Some(self.pos - 1)
        } else {
            None
        }
    }

    /// The 0-based position of the next non-space character.
    fn next_pos(&mut self) -> usize {
        self.skip_space();
        self.pos
    }

    /// Goes one nesting level deeper; `at` is where the level starts (0-based).
    fn enter(&mut self, at: usize) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!(
                "at position {}: the expression is nested more than {MAX_DEPTH} levels deep",
                at + 1
            ));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    fn expr(&mut self) -> Result<f64, String> {
        let mut value = self.term()?;
        loop {
            if let Some(at) = self.eat('+') {
                let rhs = self.term()?;
                value = finite(value + rhs, at, || binary(value, '+', rhs))?;
            } else if let Some(at) = self.eat('-') {
                let rhs = self.term()?;
                value = finite(value - rhs, at, || binary(value, '-', rhs))?;
            } else {
                return Ok(value);
            }
        }
    }

    fn term(&mut self) -> Result<f64, String> {
        let mut value = self.unary()?;
        loop {
            if let Some(at) = self.eat('*') {
                let rhs = self.unary()?;
                value = finite(value * rhs, at, || binary(value, '*', rhs))?;
            } else if let Some(at) = self.eat('/') {
                let divisor_at = self.next_pos();
                let rhs = self.unary()?;
                if rhs == 0.0 {
                    return Err(format!("at position {}: division by zero", divisor_at + 1));
                }
                value = finite(value / rhs, at, || binary(value, '/', rhs))?;
            } else if let Some(at) = self.eat('%') {
                let divisor_at = self.next_pos();
                let rhs = self.unary()?;
                if rhs == 0.0 {
                    return Err(format!(
                        "at position {}: remainder of a division by zero",
                        divisor_at + 1
                    ));
                }
                value = finite(value % rhs, at, || binary(value, '%', rhs))?;
            } else {
                return Ok(value);
            }
        }
    }

    fn unary(&mut self) -> Result<f64, String> {
        let sign = if let Some(at) = self.eat('-') {
            Some((at, -1.0))
        } else {
            self.eat('+').map(|at| (at, 1.0))
        };
        let Some((at, sign)) = sign else {
            return self.power();
        };
        self.enter(at)?;
        let value = self.unary()?;
        self.leave();
        Ok(sign * value)
    }

    fn power(&mut self) -> Result<f64, String> {
        let base = self.primary()?;
        let Some(at) = self.eat('^') else {
            return Ok(base);
        };
        self.enter(at)?;
        let exponent = self.unary()?;
        self.leave();
        finite(base.powf(exponent), at, || binary(base, '^', exponent))
    }

    fn primary(&mut self) -> Result<f64, String> {
        self.skip_space();
        match self.peek() {
            None => Err(self.error("unexpected end of the expression; expected a number, a function or '('")),
            Some('(') => {
                let open = self.pos;
                self.pos += 1;
                self.enter(open)?;
                let value = self.expr()?;
                if self.eat(')').is_none() {
                    return Err(
                        self.error(&format!("expected ')' to close the '(' at position {}", open + 1))
                    );
                }
                self.leave();
                Ok(value)
            }
            Some(c) if c.is_ascii_digit() || c == '.' => self.number(),
            Some(c) if c.is_alphabetic() => self.identifier(),
            Some(c) => {
                let hint = match c {
                    '*' => " (use ^ for powers)",
                    ')' => " (empty parentheses or a missing operand)",
                    _ => "",
                };
                Err(self.error(&format!(
                    "unexpected {c:?}{hint}; expected a number, a function or '('"
                )))
            }
        }
    }

    fn number(&mut self) -> Result<f64, String> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '.') {
            self.pos += 1;
        }
        if matches!(self.peek(), Some('e' | 'E')) {
            let mark = self.pos;
            self.pos += 1;
            if matches!(self.peek(), Some('+' | '-')) {
                self.pos += 1;
            }
            if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.pos += 1;
                }
            } else {
                // Not an exponent after all (`2e` is a number followed by `e`).
                self.pos = mark;
            }
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        let value = text
            .parse::<f64>()
            .map_err(|_| format!("at position {}: {text:?} is not a valid number", start + 1))?;
        finite(value, start, || format!("the number {text}"))
    }

    fn identifier(&mut self) -> Result<f64, String> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            self.pos += 1;
        }
        let name: String = self.chars[start..self.pos].iter().collect();
        let name = name.to_lowercase();
        match name.as_str() {
            "pi" => return Ok(std::f64::consts::PI),
            "e" => return Ok(std::f64::consts::E),
            _ => {}
        }
        let known = FUNCTIONS.contains(&name.as_str());
        self.skip_space();
        if !known {
            let kind = if self.peek() == Some('(') {
                "function"
            } else {
                "name"
            };
            return Err(format!(
                "at position {}: unknown {kind} {name:?}; expected a number, one of the constants pi and e, \
                 or one of the functions {}",
                start + 1,
                FUNCTIONS.join(" ")
            ));
        }
        let Some(open) = self.eat('(') else {
            return Err(self.error(&format!("expected '(' after the function {name}")));
        };
        self.enter(open)?;
        let mut args = vec![self.expr()?];
        while self.eat(',').is_some() {
            args.push(self.expr()?);
        }
        if self.eat(')').is_none() {
            return Err(self.error(&format!(
                "expected ',' or ')' to close the call of {name} at position {}",
                start + 1
            )));
        }
        self.leave();
        let value = apply(&name, &args).map_err(|e| format!("at position {}: {e}", start + 1))?;
        finite(value, start, || {
            let list: Vec<String> = args.iter().copied().map(format_number).collect();
            format!("{name}({})", list.join(", "))
        })
    }
}

fn binary(lhs: f64, op: char, rhs: f64) -> String {
    format!("{} {op} {}", format_number(lhs), format_number(rhs))
}

fn apply(name: &str, args: &[f64]) -> Result<f64, String> {
    let one = |f: fn(f64) -> f64| match args {
        [x] => Ok(f(*x)),
        _ => Err(format!("{name} takes 1 argument, got {}", args.len())),
    };
    match name {
        "sqrt" => one(f64::sqrt),
        "abs" => one(f64::abs),
        "round" => one(f64::round),
        "floor" => one(f64::floor),
        "ceil" => one(f64::ceil),
        "ln" => one(f64::ln),
        "log10" => one(f64::log10),
        "sin" => one(f64::sin),
        "cos" => one(f64::cos),
        "tan" => one(f64::tan),
        "min" | "max" if args.len() < 2 => {
            Err(format!("{name} takes 2 or more arguments, got {}", args.len()))
        }
        "min" => Ok(args.iter().copied().fold(f64::INFINITY, f64::min)),
        "max" => Ok(args.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
        other => Err(format!(
            "unknown function {other:?}; known: {}",
            FUNCTIONS.join(" ")
        )),
    }
}

/// Evaluate an arithmetic expression with 64-bit floating point and return just the result;
/// use it instead of doing arithmetic in your head. Supports numbers (integers, decimals,
/// scientific notation such as 1.5e3), + - * / % and ^ (power, right-associative: 2^3^2 =
/// 2^9), unary minus, parentheses, the constants pi and e, and the functions sqrt, abs, round,
/// floor, ceil, ln, log10, sin, cos, tan (radians), min and max (2 or more arguments). No
/// variables. At most 1000 characters and 100 levels of nesting. Errors (division by zero,
/// undefined or overflowing results, syntax errors) give the 1-based character position.
///
/// # Arguments
/// * `expression` - the expression, e.g. `(17.5 * 3) / 2^4` or `sqrt(2) * max(1, 4, 2)`
#[agentry::tool::tool]
pub(crate) fn calculate(expression: String) -> Result<String, String> {
    evaluate(&expression).map(format_number)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calc(s: &str) -> String {
        evaluate(s)
            .map(format_number)
            .unwrap_or_else(|e| format!("error: {e}"))
    }

    #[test]
    fn precedence_associativity_and_unary() {
        assert_eq!(calc("2+2"), "4");
        assert_eq!(calc("2 + 3 * 4"), "14");
        assert_eq!(calc("(2 + 3) * 4"), "20");
        assert_eq!(calc("10 - 4 - 3"), "3");
        assert_eq!(calc("100 / 10 / 5"), "2");
        assert_eq!(calc("2 * 3 % 4"), "2");
        assert_eq!(calc("2^3^2"), "512");
        assert_eq!(calc("(2^3)^2"), "64");
        assert_eq!(calc("-2^2"), "-4");
        assert_eq!(calc("(-2)^2"), "4");
        assert_eq!(calc("2^-1"), "0.5");
        assert_eq!(calc("2 * -3"), "-6");
        assert_eq!(calc("--3"), "3");
        assert_eq!(calc("+3 - -2"), "5");
        assert_eq!(calc("17 % 5"), "2");
        assert_eq!(calc("-7 % 3"), "-1");
        assert_eq!(calc("1/3"), "0.3333333333333333");
        assert_eq!(calc("1.5e3 + .5"), "1500.5");
        assert_eq!(calc("2E-3 * 1e+3"), "2");
        assert_eq!(calc("2^10"), "1024");
        assert_eq!(calc("0.1 + 0.2"), "0.30000000000000004");
        assert_eq!(calc("-0"), "0");
        assert_eq!(calc("  \t( 1 )\n"), "1");
    }

    #[test]
    fn functions_and_constants() {
        assert_eq!(calc("sqrt(16) + abs(-2)"), "6");
        assert_eq!(calc("max(1, 7, 3) - min(4, 2)"), "5");
        assert_eq!(calc("min(3, -1, 2, 0)"), "-1");
        assert_eq!(calc("round(2.5) + floor(1.9) + ceil(1.1)"), "6");
        assert_eq!(calc("round(-2.5)"), "-3");
        assert_eq!(calc("log10(1000)"), "3");
        assert_eq!(calc("round(PI * 100)"), "314");
        assert_eq!(calc("pi"), "3.141592653589793");
        assert_eq!(calc("e"), "2.718281828459045");
        assert_eq!(calc("ln(e)"), "1");
        assert_eq!(calc("cos(0) + sin(0) + tan(0)"), "1");
        assert_eq!(
            calc("2e"),
            "error: at position 2: unexpected 'e'; expected an operator (+ - * / % ^) or the end of the expression"
        );
        assert_eq!(calc("2*e"), "5.43656365691809");
        assert_eq!(calc("sqrt (9)"), "3");
        assert_eq!(calc("sqrt(max(2, 3) ^ 2)"), "3");
    }

    #[test]
    fn formatting() {
        assert_eq!(format_number(4.0), "4");
        assert_eq!(format_number(-12.0), "-12");
        assert_eq!(format_number(0.5), "0.5");
        assert_eq!(format_number(-0.0), "0");
        assert_eq!(format_number(999_999_999_999_999.0), "999999999999999");
        assert_eq!(format_number(1e15), "1e15");
        assert_eq!(format_number(1e300), "1e300");
        assert_eq!(format_number(-2.5e20), "-2.5e20");
        assert_eq!(format_number(0.000_001), "0.000001");
        assert_eq!(format_number(1.5e-7), "1.5e-7");
    }

    #[test]
    fn errors_say_where_and_what() {
        assert_eq!(
            calc(""),
            "error: the expression is empty; expected a number, a function or '('"
        );
        assert!(calc("   ").contains("the expression is empty"));
        assert_eq!(calc("1/0"), "error: at position 3: division by zero");
        assert_eq!(calc("1 / (2 - 2)"), "error: at position 5: division by zero");
        assert_eq!(
            calc("1 % 0"),
            "error: at position 5: remainder of a division by zero"
        );
        assert_eq!(
            calc("(1 + 2"),
            "error: at position 7: expected ')' to close the '(' at position 1"
        );
        assert_eq!(
            calc("1 + 2)"),
            "error: at position 6: unexpected ')' (this ')' has no matching '('); expected an operator \
             (+ - * / % ^) or the end of the expression"
        );
        assert_eq!(
            calc("1 2"),
            "error: at position 3: unexpected '2'; expected an operator (+ - * / % ^) or the end of the expression"
        );
        assert!(calc("()").starts_with("error: at position 2: unexpected ')' (empty parentheses"));
        assert!(calc("2 ** 3").contains("position 4: unexpected '*' (use ^ for powers)"));
        assert!(
            calc("2 * x").starts_with("error: at position 5: unknown name \"x\"; expected a number"),
            "{}",
            calc("2 * x")
        );
        assert!(calc("foo(1)").starts_with("error: at position 1: unknown function \"foo\""));
        assert!(calc("exp(1)").contains("functions sqrt abs round floor ceil ln log10 sin cos tan min max"));
        assert_eq!(
            calc("sqrt 4"),
            "error: at position 6: expected '(' after the function sqrt"
        );
        assert_eq!(
            calc("max(1, 2"),
            "error: at position 9: expected ',' or ')' to close the call of max at position 1"
        );
        assert_eq!(
            calc("1 + sqrt(1, 2)"),
            "error: at position 5: sqrt takes 1 argument, got 2"
        );
        assert_eq!(
            calc("max(1)"),
            "error: at position 1: max takes 2 or more arguments, got 1"
        );
        assert_eq!(
            calc("1 +"),
            "error: at position 4: unexpected end of the expression; expected a number, a function or '('"
        );
        assert_eq!(
            calc("1.2.3"),
            "error: at position 1: \"1.2.3\" is not a valid number"
        );
        assert_eq!(calc("2 + ."), "error: at position 5: \".\" is not a valid number");
        assert!(calc("1 $ 2").starts_with("error: at position 3: unexpected '$'; expected an operator"));
    }

    #[test]
    fn non_finite_results_are_refused_where_they_happen() {
        assert_eq!(
            calc("1 + sqrt(-1)"),
            "error: at position 5: sqrt(-1) is undefined (not a real number)"
        );
        assert_eq!(
            calc("ln(0)"),
            "error: at position 1: ln(0) is infinite or too large for a 64-bit float"
        );
        assert_eq!(
            calc("10^400"),
            "error: at position 3: 10 ^ 400 is infinite or too large for a 64-bit float"
        );
        assert_eq!(
            calc("(-8)^(1/3)"),
            "error: at position 5: -8 ^ 0.3333333333333333 is undefined (not a real number)"
        );
        assert_eq!(
            calc("1e308 * 10"),
            "error: at position 7: 1e308 * 10 is infinite or too large for a 64-bit float"
        );
        assert_eq!(
            calc("2 - 1e999"),
            "error: at position 5: the number 1e999 is infinite or too large for a 64-bit float"
        );
        assert_eq!(
            calc("1 / 1e-320"),
            "error: at position 3: 1 / 1e-320 is infinite or too large for a 64-bit float"
        );
    }

    #[test]
    fn length_and_depth_limits() {
        let long = format!("1{}", "+1".repeat(500));
        assert_eq!(long.len(), 1001);
        assert_eq!(
            calc(&long),
            "error: the expression is 1001 characters long; at most 1000 are accepted"
        );
        assert_eq!(calc(&format!("1{}", "+1".repeat(499))), "500");

        let nested = |n: usize| format!("{}1{}", "(".repeat(n), ")".repeat(n));
        assert_eq!(calc(&nested(MAX_DEPTH)), "1");
        assert_eq!(
            calc(&nested(MAX_DEPTH + 1)),
            "error: at position 101: the expression is nested more than 100 levels deep"
        );
        assert!(calc(&format!("{}1", "-".repeat(101))).contains("nested more than 100 levels"));
        assert_eq!(calc(&format!("{}1", "-".repeat(100))), "1");
        assert!(calc(&format!("1{}", "^1".repeat(101))).contains("nested more than 100 levels"));
        assert!(calc(&format!("{}1{}", "abs(".repeat(101), ")".repeat(101))).contains("nested more"));
        // The deepest input that fits the length limit does not overflow the stack.
        assert!(calc(&"(".repeat(MAX_LEN)).contains("nested more than 100"));
        assert!(calc(&"-".repeat(MAX_LEN)).contains("nested more than 100"));
    }
}
