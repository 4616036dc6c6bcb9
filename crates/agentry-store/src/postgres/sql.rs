//! Statements run prepared, once per connection: each statement's text is parsed and planned by
//! the server the first time a connection runs it, and later runs send only its parameters (one
//! round trip instead of two, no parsing). Errors come back as the store's.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::Ctx;
use crate::StoreError;

/// A statement's parameters.
pub(super) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// The rows `sql` answers.
pub(super) async fn query(
    client: &impl GenericClient,
    ctx: &Ctx,
    sql: &str,
    params: Params<'_>,
) -> Result<Vec<Row>, StoreError> {
    let statement = client.prepare_cached(sql).await.map_err(|e| ctx.err(e))?;
    client.query(&statement, params).await.map_err(|e| ctx.err(e))
}

/// The one row `sql` answers, if any (more than one is an error).
pub(super) async fn query_opt(
    client: &impl GenericClient,
    ctx: &Ctx,
    sql: &str,
    params: Params<'_>,
) -> Result<Option<Row>, StoreError> {
    let statement = client.prepare_cached(sql).await.map_err(|e| ctx.err(e))?;
    client.query_opt(&statement, params).await.map_err(|e| ctx.err(e))
}

/// Runs `sql`; the number of rows it changed.
pub(super) async fn execute(
    client: &impl GenericClient,
    ctx: &Ctx,
    sql: &str,
    params: Params<'_>,
) -> Result<u64, StoreError> {
    let statement = client.prepare_cached(sql).await.map_err(|e| ctx.err(e))?;
    client.execute(&statement, params).await.map_err(|e| ctx.err(e))
}
