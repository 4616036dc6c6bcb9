//! A script tool's code: JavaScript as written, or TypeScript with its types stripped (oxc), so
//! that the engine runs plain JavaScript and no node is needed.

use std::path::Path;

use crate::error::LoadError;

/// The JavaScript of `text`, read from `file` (`.ts`/`.tsx`: types stripped; `.js`: as is).
/// Syntax errors are found here, at load time.
pub fn to_javascript(text: &str, file: &Path) -> Result<String, LoadError> {
    let name = file.display().to_string();
    let code_error = |detail: String| LoadError::Code {
        file: name.clone(),
        detail,
    };
    let allocator = oxc_allocator::Allocator::default();
    let source_type = oxc_span::SourceType::from_path(file).map_err(|e| code_error(e.to_string()))?;
    let parsed = oxc_parser::Parser::new(&allocator, text, source_type).parse();
    if let Some(first) = parsed.diagnostics.first() {
        return Err(code_error(describe(
            first.to_string(),
            first
                .labels
                .first()
                .and_then(|label| usize::try_from(label.offset()).ok()),
            text,
        )));
    }
    let mut program = parsed.program;
    if program
        .body
        .iter()
        .any(|statement| statement.is_module_declaration())
    {
        return Err(code_error(
            "import and export are not supported: a script tool is one file, with the AssistantTool global"
                .into(),
        ));
    }
    if !source_type.is_typescript() && !source_type.is_jsx() {
        return Ok(text.to_owned());
    }
    // The transformer asserts on input it does not expect; a tool's code must never take the
    // agent down, so a panic becomes a load error.
    let stripped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let scoping = oxc_semantic::SemanticBuilder::new()
            .with_enum_eval(true)
            .build(&program)
            .semantic
            .into_scoping();
        let options = oxc_transformer::TransformOptions::default();
        let transformed = oxc_transformer::Transformer::new(&allocator, file, &options)
            .build_with_scoping(scoping, &mut program);
        match transformed.diagnostics.first() {
            Some(first) => Err(describe(
                first.to_string(),
                first
                    .labels
                    .first()
                    .and_then(|label| usize::try_from(label.offset()).ok()),
                text,
            )),
            None => Ok(oxc_codegen::Codegen::new().build(&program).code),
        }
    }));
    match stripped {
        Ok(result) => result.map_err(code_error),
        Err(_) => Err(code_error("the TypeScript could not be transformed".into())),
    }
}

/// A diagnostic's message, with the line it points at.
fn describe(message: String, offset: Option<usize>, text: &str) -> String {
    match offset {
        Some(offset) => {
            let line = text[..offset.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {message}")
        }
        None => message,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn typescript_loses_its_types_and_keeps_its_code() {
        let js = to_javascript(
            "interface P { q: string }\nconst run = async (p: P): Promise<string> => p.q as string\nenum E { A }\n",
            Path::new("assistant_tool.ts"),
        )
        .unwrap();
        assert!(!js.contains("interface") && !js.contains(": P"), "{js}");
        assert!(js.contains("const run = async (p) => p.q"), "{js}");
        assert!(js.contains("E[\"A\"]"), "{js}");
    }

    #[test]
    fn a_syntax_error_or_an_import_is_refused_at_load_with_its_line() {
        let error = to_javascript("const a = 1\nconst = 2\n", Path::new("t.js")).unwrap_err();
        assert!(error.to_string().contains("line 2"), "{error}");
        let error = to_javascript("import x from 'y'\n", Path::new("t.ts")).unwrap_err();
        assert!(error.to_string().contains("import and export"), "{error}");
    }
}
