//! `calculate`: exact, safe arithmetic for the model (no eval, no I/O).

const MAX_LEN: usize = 1000;
const MAX_DEPTH: usize = 100;

/// Evaluates an arithmetic expression; errors say where and what was expected.
pub fn evaluate(expression: &str) -> Result<f64, String> {
    if expression.chars().count() > MAX_LEN {
        return Err(format!("the expression is longer than {MAX_LEN} characters"));
    }
    let mut parser = Parser {
        chars: expression.chars().collect(),
        pos: 0,
        depth: 0,
    };
    parser.skip_space();
    if parser.at_end() {
        return Err("the expression is empty".into());
    }
    let value = parser.expr()?;
    parser.skip_space();
    if let Some(c) = parser.peek() {
        return Err(parser.error(&format!("unexpected {c:?}; expected an operator or the end")));
    }
    if value.is_nan() {
        return Err("the result is not a number (e.g. sqrt of a negative number or 0/0)".into());
    }
    if value.is_infinite() {
        return Err("the result is infinite (overflow)".into());
    }
    Ok(value)
}

/// `4` rather than `4.0` for integral results; the shortest exact form otherwise.
pub fn format_number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        let rounded = format!("{value:.0}");
        if rounded == "-0" { "0".to_owned() } else { rounded }
    } else {
        value.to_string()
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

    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn enter(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(&format!(
                "the expression is nested deeper than {MAX_DEPTH} levels"
            )));
        }
        Ok(())
    }

    /// expr := term (('+' | '-') term)*
    fn expr(&mut self) -> Result<f64, String> {
        self.enter()?;
        let mut value = self.term()?;
        loop {
            if self.eat('+') {
                value += self.term()?;
            } else if self.eat('-') {
                value -= self.term()?;
            } else {
                break;
            }
        }
        self.depth -= 1;
        Ok(value)
    }

    /// term := unary (('*' | '/' | '%') unary)*
    fn term(&mut self) -> Result<f64, String> {
        let mut value = self.unary()?;
        loop {
            if self.eat('*') {
                value *= self.unary()?;
            } else if self.eat('/') {
                let at = self.pos;
                let divisor = self.unary()?;
                if divisor == 0.0 {
                    return Err(format!("at position {}: division by zero", at + 1));
                }
                value /= divisor;
            } else if self.eat('%') {
                let at = self.pos;
                let divisor = self.unary()?;
                if divisor == 0.0 {
                    return Err(format!("at position {}: remainder of a division by zero", at + 1));
                }
                value %= divisor;
            } else {
                return Ok(value);
            }
        }
    }

    /// unary := ('-' | '+') unary | power   (so -2^2 = -4)
    fn unary(&mut self) -> Result<f64, String> {
        self.enter()?;
        let value = if self.eat('-') {
            -self.unary()?
        } else if self.eat('+') {
            self.unary()?
        } else {
            self.power()?
        };
        self.depth -= 1;
        Ok(value)
    }

    /// power := primary ('^' unary)?   (right-associative: 2^3^2 = 2^9)
    fn power(&mut self) -> Result<f64, String> {
        let base = self.primary()?;
        if self.eat('^') {
            let exponent = self.unary()?;
            return Ok(base.powf(exponent));
        }
        Ok(base)
    }

    fn primary(&mut self) -> Result<f64, String> {
        self.skip_space();
        match self.peek() {
            None => Err(self.error("unexpected end; expected a number, a function or '('")),
            Some('(') => {
                self.pos += 1;
                let value = self.expr()?;
                if !self.eat(')') {
                    return Err(self.error("expected ')'"));
                }
                Ok(value)
            }
            Some(c) if c.is_ascii_digit() || c == '.' => self.number(),
            Some(c) if c.is_alphabetic() => self.identifier(),
            Some(c) => Err(self.error(&format!("unexpected {c:?}; expected a number, a function or '('"))),
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
                // Not an exponent after all (e.g. `2e` is a number followed by `e`).
                self.pos = mark;
            }
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        text.parse::<f64>()
            .map_err(|_| format!("at position {}: {text:?} is not a valid number", start + 1))
    }

    fn identifier(&mut self) -> Result<f64, String> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            self.pos += 1;
        }
        let name: String = self.chars[start..self.pos].iter().collect();
        let name = name.to_ascii_lowercase();
        match name.as_str() {
            "pi" => return Ok(std::f64::consts::PI),
            "e" => return Ok(std::f64::consts::E),
            _ => {}
        }
        if !self.eat('(') {
            return Err(format!(
                "at position {}: unknown name {name:?}; known constants are pi and e, functions need '('",
                start + 1
            ));
        }
        let mut args = vec![self.expr()?];
        while self.eat(',') {
            args.push(self.expr()?);
        }
        if !self.eat(')') {
            return Err(self.error("expected ',' or ')' after a function argument"));
        }
        apply(&name, &args).map_err(|e| format!("at position {}: {e}", start + 1))
    }
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
        "min" | "max" if args.len() < 2 => Err(format!("{name} takes 2 or more arguments")),
        "min" => Ok(args.iter().copied().fold(f64::INFINITY, f64::min)),
        "max" => Ok(args.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
        other => Err(format!(
            "unknown function {other:?}; known: sqrt abs round floor ceil ln log10 sin cos tan min max"
        )),
    }
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
        assert_eq!(calc("2^3^2"), "512");
        assert_eq!(calc("-2^2"), "-4");
        assert_eq!(calc("2^-1"), "0.5");
        assert_eq!(calc("--3"), "3");
        assert_eq!(calc("17 % 5"), "2");
        assert_eq!(calc("1/3"), "0.3333333333333333");
        assert_eq!(calc("1.5e3 + .5"), "1500.5");
        assert_eq!(calc("2^10"), "1024");
        assert_eq!(calc("0.1 + 0.2"), "0.30000000000000004");
        assert_eq!(calc("-0"), "0");
    }

    #[test]
    fn functions_and_constants() {
        assert_eq!(calc("sqrt(16) + abs(-2)"), "6");
        assert_eq!(calc("max(1, 7, 3) - min(4, 2)"), "5");
        assert_eq!(calc("round(2.5) + floor(1.9) + ceil(1.1)"), "6");
        assert_eq!(calc("log10(1000)"), "3");
        assert_eq!(calc("round(PI * 100)"), "314");
        assert_eq!(calc("ln(e)"), "1");
        assert_eq!(calc("cos(0)"), "1");
    }

    #[test]
    fn errors_say_where_and_what() {
        assert_eq!(calc(""), "error: the expression is empty");
        assert_eq!(calc("1/0"), "error: at position 3: division by zero");
        assert_eq!(
            calc("1 % 0"),
            "error: at position 4: remainder of a division by zero"
        );
        assert_eq!(calc("(1 + 2"), "error: at position 7: expected ')'");
        assert_eq!(
            calc("1 + 2)"),
            "error: at position 6: unexpected ')'; expected an operator or the end"
        );
        assert!(calc("2 * x").contains("position 5: unknown name \"x\""));
        assert!(calc("foo(1)").contains("unknown function \"foo\""));
        assert!(calc("sqrt(1, 2)").contains("sqrt takes 1 argument"));
        assert!(calc("max(1)").contains("max takes 2 or more"));
        assert!(calc("1 +").contains("unexpected end"));
        assert!(calc("1.2.3").contains("\"1.2.3\" is not a valid number"));
        assert!(calc("sqrt(-1)").contains("not a number"));
        assert!(calc("10^400").contains("infinite"));
        assert!(calc("1 $ 2").contains("unexpected '$'"));
        assert!(calc(&"1+".repeat(600)).contains("longer than 1000"));
        assert!(calc(&format!("{}1{}", "(".repeat(150), ")".repeat(150))).contains("deeper than 100"));
    }
}
