//! The OpenAPI document (`GET /openapi.json`), generated from the routes' annotations and the
//! request and answer types ([`crate::bodies`]).

use axum::Json;
use utoipa::{Modify, OpenApi};

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(title = "Agentry", description = "Sessions, replies with a live event stream, cancel and approval over HTTP. A bearer token is required when the server is not on loopback."),
    paths(
        crate::routes::health,
        crate::routes::tools,
        crate::routes::list_sessions,
        crate::routes::create_session,
        crate::routes::show_session,
        crate::routes::delete_session,
        crate::routes::send_message,
        crate::routes::events,
        crate::routes::cancel_reply,
        crate::routes::cancel_call,
        crate::routes::decide,
        crate::routes::answer_input,
    ),
    modifiers(&BearerAuth),
    security((), ("bearer" = []))
)]
pub struct ApiDoc;

/// `GET /openapi.json`: this document.
pub(crate) async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
