//! Procedural macros of agentry. Use them through `agentry::tool::tool`.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, FnArg, ItemFn, Lit, LitStr, Meta, Pat, Token, Type};

/// Turns a plain function into a tool.
///
/// The function stays as it is. Next to it, a unit struct named after it in PascalCase with a
/// `Tool` suffix (`get_weather` → `GetWeatherTool`) implements `agentry::tool::Tool`:
///
/// * the name is the function's name (or `#[tool(name = "...")]`);
/// * the description is the doc comment, without its `# Arguments` section
///   (or `#[tool(description = "...")]`);
/// * each parameter becomes a property of the JSON schema, typed by schemars, described by its
///   line in the `# Arguments` section (`` * `city` - the city to look up ``);
///   `Option<T>` parameters are optional;
/// * a parameter of type `ToolContext` receives the call's context instead;
/// * the function may be `async` or not, and return anything `IntoToolOutput` (strings,
///   numbers, JSON, `ToolResponse`, `Result<_, impl Display>` for errors);
/// * `#[tool(stream)]`: the (non-async) function returns a `Stream` of cumulative
///   `ToolResponse` chunks (or `Result`s of them);
/// * `#[tool(blocking)]`: the (non-async) function runs on tokio's blocking pool.
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    let args = syn::parse_macro_input!(attr as ToolArgs);
    let func = syn::parse_macro_input!(item as ItemFn);
    match expand(args, func) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

#[derive(Default)]
struct ToolArgs {
    name: Option<LitStr>,
    description: Option<LitStr>,
    stream: bool,
    blocking: bool,
}

impl Parse for ToolArgs {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut args = ToolArgs::default();
        for meta in Punctuated::<Meta, Token![,]>::parse_terminated(input)? {
            match &meta {
                Meta::Path(p) if p.is_ident("stream") => args.stream = true,
                Meta::Path(p) if p.is_ident("blocking") => args.blocking = true,
                Meta::NameValue(nv) if nv.path.is_ident("name") => args.name = Some(lit_str(&nv.value)?),
                Meta::NameValue(nv) if nv.path.is_ident("description") => {
                    args.description = Some(lit_str(&nv.value)?)
                }
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "expected `name = \"...\"`, `description = \"...\"`, `stream` or `blocking`",
                    ));
                }
            }
        }
        if args.stream && args.blocking {
            return Err(syn::Error::new(
                Span::call_site(),
                "`stream` and `blocking` exclude each other",
            ));
        }
        Ok(args)
    }
}

fn lit_str(expr: &Expr) -> syn::Result<LitStr> {
    match expr {
        Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => Ok(s.clone()),
        other => Err(syn::Error::new_spanned(other, "expected a string literal")),
    }
}

/// The doc comment split into the tool description and per-parameter descriptions.
struct Docs {
    description: String,
    params: Vec<(String, String)>,
}

fn read_docs(func: &ItemFn) -> Docs {
    let lines: Vec<String> = func
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            Meta::NameValue(nv) => lit_str(&nv.value).ok().map(|s| s.value()),
            _ => None,
        })
        .map(|l| l.strip_prefix(' ').unwrap_or(&l).to_owned())
        .collect();
    let mut description = Vec::new();
    let mut params = Vec::new();
    let mut in_args = false;
    for line in &lines {
        let trimmed = line.trim();
        if let Some(heading) = trimmed.strip_prefix('#') {
            let heading = heading.trim_start_matches('#').trim().to_ascii_lowercase();
            in_args = matches!(heading.as_str(), "arguments" | "args" | "parameters" | "params");
            if in_args {
                continue;
            }
        }
        if in_args {
            if let Some((name, text)) = param_line(trimmed) {
                params.push((name, text));
            } else if let Some((_, text)) = params.last_mut().filter(|_| !trimmed.is_empty()) {
                text.push(' ');
                text.push_str(trimmed);
            }
        } else {
            description.push(line.clone());
        }
    }
    Docs {
        description: description.join("\n").trim().to_owned(),
        params,
    }
}

/// `* `name` - text`, `- name: text`, ... → (name, text).
fn param_line(line: &str) -> Option<(String, String)> {
    let rest = line
        .strip_prefix('*')
        .or_else(|| line.strip_prefix('-'))?
        .trim_start();
    let (name, text) = if let Some(after) = rest.strip_prefix('`') {
        let end = after.find('`')?;
        (&after[..end], &after[end + 1..])
    } else {
        let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
        (&rest[..end], &rest[end..])
    };
    let text = text.trim_start().trim_start_matches([':', '-', '–', '—']).trim();
    Some((name.to_owned(), text.to_owned()))
}

fn pascal_case(name: &str) -> String {
    name.split('_')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut chars = p.chars();
            chars
                .next()
                .map(|c| c.to_uppercase().chain(chars).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}

fn is_tool_context(ty: &Type) -> bool {
    match ty {
        Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "ToolContext"),
        _ => false,
    }
}

fn expand(args: ToolArgs, func: ItemFn) -> syn::Result<TokenStream2> {
    let sig = &func.sig;
    if !sig.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            "#[tool] functions cannot be generic",
        ));
    }
    if (args.stream || args.blocking) && sig.asyncness.is_some() {
        return Err(syn::Error::new_spanned(
            sig.asyncness,
            "`stream` and `blocking` tools are plain (non-async) functions",
        ));
    }
    let fn_name = &sig.ident;
    let tool_name = args
        .name
        .map(|n| n.value())
        .unwrap_or_else(|| fn_name.to_string());
    let docs = read_docs(&func);
    let description = match args.description {
        Some(d) => d.value(),
        None if !docs.description.is_empty() => docs.description.clone(),
        None => {
            return Err(syn::Error::new_spanned(
                fn_name,
                "describe the tool for the model: add a doc comment or `#[tool(description = \"...\")]`",
            ));
        }
    };

    let mut fields = Vec::new();
    let mut call_args = Vec::new();
    for input in &sig.inputs {
        let FnArg::Typed(pat_type) = input else {
            return Err(syn::Error::new_spanned(
                input,
                "#[tool] works on free functions, not methods",
            ));
        };
        if is_tool_context(&pat_type.ty) {
            call_args.push(quote!(__ctx.clone()));
            continue;
        }
        if let Type::Reference(r) = &*pat_type.ty {
            return Err(syn::Error::new_spanned(
                r,
                "tool parameters must be owned types (e.g. `String` instead of `&str`)",
            ));
        }
        let Pat::Ident(pat) = &*pat_type.pat else {
            return Err(syn::Error::new_spanned(
                &pat_type.pat,
                "tool parameters must be plain names",
            ));
        };
        let ident = &pat.ident;
        let ty = &pat_type.ty;
        let name = ident.to_string();
        let doc = docs
            .params
            .iter()
            .find(|(n, _)| *n == name || n.trim_start_matches("r#") == name)
            .map(|(_, d)| quote!(#[doc = #d]));
        fields.push(quote!(#doc #ident: #ty));
        call_args.push(quote!(__args.#ident));
    }

    let vis = &func.vis;
    let struct_name = format_ident!("{}Tool", pascal_case(&fn_name.to_string()));
    let args_name = format_ident!("__{}Args", pascal_case(&fn_name.to_string()));
    let body = if args.stream {
        quote!(::agentry::tool::streaming(#fn_name(#(#call_args),*)))
    } else if args.blocking {
        quote!(::agentry::tool::once(async move {
            ::agentry::__private::tokio::task::spawn_blocking(move || #fn_name(#(#call_args),*)).await
        }))
    } else if sig.asyncness.is_some() {
        quote!(::agentry::tool::once(async move { #fn_name(#(#call_args),*).await }))
    } else {
        quote!(::agentry::tool::once(async move { #fn_name(#(#call_args),*) }))
    };
    let struct_doc = format!("The tool `{tool_name}`, made by `#[tool]` from [`{fn_name}`].");

    Ok(quote! {
        #func

        #[doc = #struct_doc]
        #[derive(Clone, Copy, Debug, Default)]
        #vis struct #struct_name;

        const _: () = {
            #[derive(::agentry::__private::serde::Deserialize, ::agentry::__private::schemars::JsonSchema)]
            #[serde(crate = "::agentry::__private::serde")]
            #[schemars(crate = "::agentry::__private::schemars")]
            #[allow(non_camel_case_types)]
            struct #args_name {
                #(#fields,)*
            }

            impl ::agentry::tool::Tool for #struct_name {
                fn name(&self) -> &str {
                    #tool_name
                }

                fn description(&self) -> &str {
                    #description
                }

                fn parameters(&self) -> ::agentry::__private::serde_json::Value {
                    ::agentry::tool::schema_for::<#args_name>()
                }

                #[allow(unused_variables)]
                fn call(
                    self: ::std::sync::Arc<Self>,
                    __raw: ::agentry::__private::serde_json::Map<::std::string::String, ::agentry::__private::serde_json::Value>,
                    __ctx: ::agentry::tool::ToolContext,
                ) -> ::agentry::tool::ToolStream {
                    let __args: #args_name = match ::agentry::tool::parse_args(__raw) {
                        ::std::result::Result::Ok(args) => args,
                        ::std::result::Result::Err(e) => return ::agentry::__private::error_stream(e),
                    };
                    #body
                }
            }
        };
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn param_lines_in_common_styles() {
        assert_eq!(
            param_line("* `city` - the city"),
            Some(("city".into(), "the city".into()))
        );
        assert_eq!(
            param_line("- city: the city"),
            Some(("city".into(), "the city".into()))
        );
        assert_eq!(
            param_line("* limit — at most"),
            Some(("limit".into(), "at most".into()))
        );
        assert_eq!(param_line("plain text"), None);
    }

    #[test]
    fn docs_split_description_and_arguments() {
        let func: ItemFn = syn::parse_quote! {
            /// Search the web.
            ///
            /// Returns the top hits.
            ///
            /// # Arguments
            /// * `query` - what to look for,
            ///   in plain words
            /// * `limit` - at most this many
            ///
            /// # Examples
            /// none
            fn search(query: String, limit: u32) {}
        };
        let docs = read_docs(&func);
        assert_eq!(
            docs.description,
            "Search the web.\n\nReturns the top hits.\n\n# Examples\nnone"
        );
        assert_eq!(
            docs.params,
            vec![
                ("query".to_owned(), "what to look for, in plain words".to_owned()),
                ("limit".to_owned(), "at most this many".to_owned())
            ]
        );
    }

    #[test]
    fn pascal_case_names() {
        assert_eq!(pascal_case("get_weather"), "GetWeather");
        assert_eq!(pascal_case("add"), "Add");
    }
}
