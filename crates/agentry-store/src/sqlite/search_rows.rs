//! The queries memories and knowledge chunks share the shape of: ids ranked by full-text
//! search, and the vectors of a set of rows.

use rusqlite::{Connection, OptionalExtension, Params, params};

use super::Ctx;
use crate::StoreError;
use crate::search::terms::match_expression;
use crate::search::vectors::from_bytes;

/// Texts a full-text search ranks at most. bm25 is computed for every text it ranks, about 4 µs
/// each among 100,000, so a query word in thousands of texts would cost tens of milliseconds:
/// such a word is left out when a rarer one is kept (being common, it adds little to the
/// ranking), and when even the rarest word is in more texts than this, only the newest of them
/// are ranked (the search by meaning still sees every text).
const MATCHED_TEXTS_BUDGET: i64 = 1_000;

/// A table of searchable texts: its full-text index (by rowid), and the column that scopes
/// a search to one user or base, with the small index over `(scope, id)`.
pub(super) struct SearchedTable {
    rows: &'static str,
    full_text: &'static str,
    scope_column: &'static str,
    scope_index: &'static str,
}

/// Long-term memories, scoped by user.
pub(super) const MEMORIES: SearchedTable = SearchedTable {
    rows: "memories",
    full_text: "memories_fts",
    scope_column: "user_name",
    scope_index: "memories_user",
};

/// Knowledge chunks, scoped by base.
pub(super) const CHUNKS: SearchedTable = SearchedTable {
    rows: "knowledge_chunks",
    full_text: "knowledge_fts",
    scope_column: "base_id",
    scope_index: "knowledge_chunks_base",
};

/// Makes the connection's views of how many texts hold each term (`temp.<table>_vocab`), once
/// per connection, after the schema is migrated.
pub(super) fn create_term_counts(conn: &Connection, ctx: &Ctx) -> Result<(), StoreError> {
    for table in [MEMORIES, CHUNKS] {
        let fts = table.full_text;
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.{fts}_vocab USING fts5vocab(main, {fts}, row)"
        ))
        .map_err(|e| ctx.err(e))?;
    }
    Ok(())
}

/// The ids of `table`'s rows in `scope` that hold `terms`, best first by bm25; none when no
/// term is left to search ([`selective_match`]). At most [`MATCHED_TEXTS_BUDGET`] texts are
/// ranked, the newest; the scope is checked in its `(scope, id)` index, not in the rows, which
/// hold the vectors.
pub(super) fn lexical_ids(
    conn: &Connection,
    ctx: &Ctx,
    table: &SearchedTable,
    terms: Vec<String>,
    scope: &dyn rusqlite::ToSql,
    limit: usize,
) -> Result<Vec<i64>, StoreError> {
    let SearchedTable {
        rows,
        full_text: fts,
        scope_column,
        scope_index,
    } = table;
    let Some(matching) = selective_match(conn, ctx, fts, terms)? else {
        return Ok(Vec::new());
    };
    let sql = format!(
        "SELECT id FROM (
             SELECT r.id AS id, bm25({fts}) AS score
             FROM {fts} f JOIN {rows} r INDEXED BY {scope_index} ON r.id = f.rowid
             WHERE {fts} MATCH ?1 AND r.{scope_column} = ?2
             ORDER BY f.rowid DESC LIMIT ?4)
         ORDER BY score LIMIT ?3"
    );
    ids(
        conn,
        ctx,
        &sql,
        params![matching, scope, limit as i64, MATCHED_TEXTS_BUDGET],
    )
}

/// `terms` as the FTS5 query to run on the table `fts`: the rarest first, then the others
/// while the texts they are in stay within [`MATCHED_TEXTS_BUDGET`]. A term the index does not
/// hold as written (it may match with its accents folded) is kept. `None` when no term is left.
fn selective_match(
    conn: &Connection,
    ctx: &Ctx,
    fts: &str,
    terms: Vec<String>,
) -> Result<Option<String>, StoreError> {
    let mut lookup = conn
        .prepare_cached(&format!("SELECT doc FROM temp.{fts}_vocab WHERE term = ?1"))
        .map_err(|e| ctx.err(e))?;
    let mut counted: Vec<(i64, String)> = Vec::with_capacity(terms.len());
    for term in terms {
        let texts: Option<i64> = lookup
            .query_row(params![term], |row| row.get(0))
            .optional()
            .map_err(|e| ctx.err(e))?;
        counted.push((texts.unwrap_or(0), term));
    }
    counted.sort();
    let mut kept = Vec::with_capacity(counted.len());
    // Texts the kept terms the index holds are in; `None` until the rarest of them is kept.
    let mut matched: Option<i64> = None;
    for (texts, term) in counted {
        if texts == 0 {
            kept.push(term);
            continue;
        }
        let total = matched.unwrap_or(0) + texts;
        if matched.is_none() || total <= MATCHED_TEXTS_BUDGET {
            matched = Some(total);
            kept.push(term);
        }
    }
    Ok(match_expression(&kept))
}

/// The rows of a search scope (`memories:USER` or `chunks:BASE_ID`) and the changes it has
/// seen, from the counters the schema's triggers keep; `(0, 0)` for a scope never written.
pub(super) fn scope_state(conn: &Connection, ctx: &Ctx, scope: &str) -> Result<(i64, i64), StoreError> {
    conn.prepare_cached("SELECT row_count, changes FROM search_scopes WHERE scope = ?1")
        .and_then(|mut statement| {
            statement
                .query_row(params![scope], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .map(Option::unwrap_or_default)
        .map_err(|e| ctx.err(e))
}

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
