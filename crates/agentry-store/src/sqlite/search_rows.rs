//! The queries memories and knowledge chunks share the shape of: ids ranked by full-text
//! search, and the vectors of a set of rows.

use rusqlite::{Connection, Params};

use super::Ctx;
use crate::StoreError;
use crate::search::vectors::from_bytes;

/// The ids `sql` selects (its first column), in its order.
pub(super) fn ids(
    conn: &Connection,
    ctx: &Ctx,
    sql: &str,
    params: impl Params,
) -> Result<Vec<i64>, StoreError> {
    let mut statement = conn.prepare_cached(sql).map_err(|e| ctx.err(e))?;
    statement
        .query_map(params, |row| row.get(0))
        .and_then(|rows| rows.collect::<Result<Vec<i64>, _>>())
        .map_err(|e| ctx.err(e))
}

/// The `(id, embedding)` rows `sql` selects as vectors; a blob that is not whole `f32`s is left
/// out.
pub(super) fn vectors(
    conn: &Connection,
    ctx: &Ctx,
    sql: &str,
    params: impl Params,
) -> Result<Vec<(i64, Vec<f32>)>, StoreError> {
    let mut statement = conn.prepare_cached(sql).map_err(|e| ctx.err(e))?;
    let rows = statement
        .query_map(params, |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, Vec<u8>>(1)?))
        })
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(|e| ctx.err(e))?;
    Ok(rows
        .into_iter()
        .filter_map(|(id, bytes)| from_bytes(&bytes).map(|v| (id, v)))
        .collect())
}
