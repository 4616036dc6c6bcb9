//! An MCP tool result as the agent's: every content kind a block or a short note.

use rmcp::model::{CallToolResult, ResourceContents};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::message::{ContentBlock, MediaSource};
use crate::tool::{ToolError, ToolResponse};

/// Where a running MCP call sends its cumulative chunks and its result.
pub(super) type Chunks = mpsc::UnboundedSender<Result<ToolResponse, ToolError>>;

/// MCP content → our blocks; nothing is dropped: kinds we cannot carry become short notes.
/// `isError` makes an error result; `structuredContent` and `_meta` go to the metadata (kept in
/// memory with the result).
pub(crate) fn map_result(result: CallToolResult) -> ToolResponse {
    let mut content = Vec::with_capacity(result.content.len());
    for block in result.content {
        content.push(match block {
            rmcp::model::ContentBlock::Text(text) => ContentBlock::text(text.text),
            rmcp::model::ContentBlock::Image(image) => ContentBlock::Image {
                source: MediaSource::Base64 {
                    media_type: image.mime_type,
                    data: image.data,
                },
            },
            rmcp::model::ContentBlock::Audio(audio) => ContentBlock::Audio {
                source: MediaSource::Base64 {
                    media_type: audio.mime_type,
                    data: audio.data,
                },
            },
            rmcp::model::ContentBlock::Resource(embedded) => match embedded.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    ContentBlock::text(format!("[resource {uri}]\n{text}"))
                }
                ResourceContents::BlobResourceContents {
                    uri, mime_type, blob, ..
                } => match mime_type {
                    Some(mime) if mime.starts_with("image/") => ContentBlock::Image {
                        source: MediaSource::Base64 {
                            media_type: mime,
                            data: blob,
                        },
                    },
                    mime => ContentBlock::text(format!(
                        "[resource {uri} ({}), {} bytes of base64 not shown]",
                        mime.as_deref().unwrap_or("binary"),
                        blob.len()
                    )),
                },
                other => ContentBlock::text(format!("[resource of an unsupported kind: {}]", json!(other))),
            },
            rmcp::model::ContentBlock::ResourceLink(link) => {
                let mime = link.mime_type.map(|m| format!(" ({m})")).unwrap_or_default();
                let about = link.description.map(|d| format!(": {d}")).unwrap_or_default();
                ContentBlock::text(format!(
                    "[resource link: {} {}{mime}{about}]",
                    link.name, link.uri
                ))
            }
            other => ContentBlock::text(format!("[content of an unsupported kind: {}]", json!(other))),
        });
    }
    let mut response = ToolResponse::new(content);
    response.is_error = result.is_error.unwrap_or(false);
    if let Some(structured) = result.structured_content {
        response.metadata.insert("structured_content".into(), structured);
    }
    if let Some(meta) = result.meta {
        response.metadata.insert(
            "mcp_meta".into(),
            serde_json::to_value(meta).unwrap_or(Value::Null),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(result: Value) -> ToolResponse {
        map_result(serde_json::from_value(result).unwrap_or_else(|e| panic!("{e}")))
    }

    #[test]
    fn every_content_kind_becomes_a_block_or_a_note() {
        let response = mapped(json!({
            "content": [
                {"type": "text", "text": "plain"},
                {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
                {"type": "resource", "resource": {"uri": "file:///a.bin", "mimeType": "application/zip", "blob": "UEsDBA=="}},
                {"type": "resource", "resource": {"uri": "file:///p.png", "mimeType": "image/png", "blob": "iVBORw=="}},
                {"type": "resource", "resource": {"uri": "file:///n.txt", "text": "notes"}},
                {"type": "resource_link", "uri": "file:///big.csv", "name": "big.csv", "mimeType": "text/csv"}
            ],
            "isError": true,
            "structuredContent": {"rows": 3},
            "_meta": {"trace": "t1"}
        }));
        assert!(response.is_error);
        assert_eq!(response.content.len(), 6);
        assert!(
            matches!(&response.content[1], ContentBlock::Audio { source: MediaSource::Base64 { media_type, .. } } if media_type == "audio/wav")
        );
        assert!(matches!(&response.content[3], ContentBlock::Image { .. }));
        let text = response.text_content();
        assert!(
            text.contains("[resource file:///a.bin (application/zip), 8 bytes of base64 not shown]"),
            "{text}"
        );
        assert!(text.contains("[resource file:///n.txt]\nnotes"), "{text}");
        assert!(
            text.contains("[resource link: big.csv file:///big.csv (text/csv)]"),
            "{text}"
        );
        assert_eq!(response.metadata["structured_content"], json!({"rows": 3}));
        assert_eq!(response.metadata["mcp_meta"]["trace"], "t1");
    }
}
