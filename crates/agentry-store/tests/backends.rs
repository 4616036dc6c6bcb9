//! The stores the conformance suite runs on: a [`TestDb`] is one database of one backend, and
//! [`conformance!`] makes a test of each backend from one body.
//!
//! PostgreSQL: the tests read the server's URL from `AGENTRY_TEST_POSTGRES` and give each test
//! a schema of its own (`t_` and a random uuid), so they run in parallel on one database; a
//! passing test drops its schema, a failing one leaves it for a look. Without the variable a
//! PostgreSQL test prints that it was skipped and passes, unless `AGENTRY_REQUIRE_POSTGRES=1`:
//! then it fails. The PostgreSQL tests are built with the `postgres` feature of agentry-store
//! (`cargo test -p agentry-store --features postgres`, or any workspace build that enables it).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentry_store::{SessionId, SessionStore, SqliteStore, StoreError};

/// The server the PostgreSQL tests use.
#[cfg(feature = "postgres")]
pub const POSTGRES_URL_VAR: &str = "AGENTRY_TEST_POSTGRES";
/// Set to 1, a PostgreSQL test without a server fails instead of being skipped.
pub const REQUIRE_POSTGRES_VAR: &str = "AGENTRY_REQUIRE_POSTGRES";

/// One database of one backend. Clones name the same database.
#[derive(Clone)]
pub struct TestDb {
    backend: Arc<Backend>,
}

enum Backend {
    Sqlite {
        _dir: tempfile::TempDir,
        path: PathBuf,
    },
    #[cfg(feature = "postgres")]
    Postgres {
        url: String,
        schema: String,
    },
}

impl TestDb {
    /// A fresh SQLite file in a temporary directory (removed with the last clone).
    pub fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        TestDb {
            backend: Arc::new(Backend::Sqlite { _dir: dir, path }),
        }
    }

    /// A fresh schema on the server of `AGENTRY_TEST_POSTGRES`; `None` (after saying so) when
    /// the variable is unset, unless `AGENTRY_REQUIRE_POSTGRES=1`, which makes that a failure.
    #[cfg(feature = "postgres")]
    pub fn postgres(test: &str) -> Option<TestDb> {
        let url = std::env::var(POSTGRES_URL_VAR).ok().filter(|u| !u.is_empty());
        let Some(url) = url else {
            assert!(
                !postgres_required(),
                "{test}: {REQUIRE_POSTGRES_VAR}=1 but {POSTGRES_URL_VAR} names no server \
                 (set it to postgres://USER@HOST:PORT/DB, e.g. the URL `scripts/postgres start` prints)"
            );
            println!("{test}: skipped, {POSTGRES_URL_VAR} is not set");
            return None;
        };
        Some(TestDb {
            backend: Arc::new(Backend::Postgres {
                url,
                schema: format!("t_{}", uuid::Uuid::new_v4().simple()),
            }),
        })
    }

    /// Another fresh database of the same backend.
    pub fn another(&self) -> TestDb {
        match &*self.backend {
            Backend::Sqlite { .. } => TestDb::sqlite(),
            #[cfg(feature = "postgres")]
            Backend::Postgres { url, .. } => TestDb {
                backend: Arc::new(Backend::Postgres {
                    url: url.clone(),
                    schema: format!("t_{}", uuid::Uuid::new_v4().simple()),
                }),
            },
        }
    }

    /// A new store on this database, as another process would open it.
    pub async fn open(&self) -> Arc<dyn SessionStore> {
        match &*self.backend {
            Backend::Sqlite { path, .. } => Arc::new(SqliteStore::open(path).unwrap()),
            #[cfg(feature = "postgres")]
            Backend::Postgres { url, schema } => Arc::new(
                agentry_store::PostgresStore::connect_with(
                    agentry_store::PostgresOptions::new(url.as_str()).schema(schema.as_str()),
                )
                .await
                .unwrap(),
            ),
        }
    }

    /// A new PostgreSQL store on this database with `options` changed by `change` (the lease's
    /// lifetime, its renewal); `None` on SQLite, whose leases never expire.
    #[cfg(feature = "postgres")]
    pub async fn open_postgres(
        &self,
        change: impl FnOnce(agentry_store::PostgresOptions) -> agentry_store::PostgresOptions,
    ) -> Option<agentry_store::PostgresStore> {
        match &*self.backend {
            Backend::Sqlite { .. } => None,
            Backend::Postgres { url, schema } => Some(
                agentry_store::PostgresStore::connect_with(change(
                    agentry_store::PostgresOptions::new(url.as_str()).schema(schema.as_str()),
                ))
                .await
                .unwrap(),
            ),
        }
    }

    /// How long a lease dropped by one store instance may take to be free for another: none on
    /// SQLite (the file lock goes with the drop), a moment on PostgreSQL (a background task
    /// deletes the lease row).
    pub fn release_time(&self) -> Duration {
        match &*self.backend {
            Backend::Sqlite { .. } => Duration::ZERO,
            #[cfg(feature = "postgres")]
            Backend::Postgres { .. } => Duration::from_secs(5),
        }
    }

    /// `attempt` again every 50 ms while it fails with [`StoreError::SessionBusy`], for at most
    /// [`release_time`](Self::release_time) (on SQLite: once): what opening a session another
    /// store instance has just let go of takes.
    pub async fn once_released<T, F, Fut>(&self, mut attempt: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let deadline = tokio::time::Instant::now() + self.release_time();
        loop {
            match attempt().await {
                Err(StoreError::SessionBusy { .. }) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                outcome => return outcome,
            }
        }
    }

    /// How many rows of `table` belong to `session` (its `session_id` column), read past the
    /// store.
    pub async fn rows_of(&self, table: &str, session: &SessionId) -> i64 {
        let sql = format!("SELECT count(*) FROM {table} WHERE session_id = $1");
        match &*self.backend {
            Backend::Sqlite { path, .. } => {
                let conn = rusqlite::Connection::open(path).unwrap();
                conn.query_row(&sql.replace('$', "?"), [session.as_str()], |r| r.get(0))
                    .unwrap()
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres { url, schema } => {
                let client = postgres_client(url, schema).await;
                client.query_one(&sql, &[&session.as_str()]).await.unwrap().get(0)
            }
        }
    }

    /// Deletes the row of `session` behind the store's back (its rows go with it, as the
    /// schema's foreign keys say), as an operator or another program might.
    pub async fn delete_session_row(&self, session: &SessionId) {
        match &*self.backend {
            Backend::Sqlite { path, .. } => {
                let conn = rusqlite::Connection::open(path).unwrap();
                conn.pragma_update(None, "foreign_keys", true).unwrap();
                conn.execute("DELETE FROM sessions WHERE id = ?1", [session.as_str()])
                    .unwrap();
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres { url, schema } => {
                let client = postgres_client(url, schema).await;
                client
                    .execute("DELETE FROM sessions WHERE id = $1", &[&session.as_str()])
                    .await
                    .unwrap();
            }
        }
    }

    /// After a test passed: drops a PostgreSQL test's schema (SQLite's directory goes with the
    /// last clone).
    pub async fn finish(self) {
        #[cfg(feature = "postgres")]
        if let Backend::Postgres { url, schema } = &*self.backend {
            let client = postgres_client(url, "public").await;
            if let Err(e) = client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .await
            {
                eprintln!("the test schema {schema} was left behind: {e}");
            }
        }
    }
}

/// Whether `AGENTRY_REQUIRE_POSTGRES=1`.
pub fn postgres_required() -> bool {
    std::env::var(REQUIRE_POSTGRES_VAR).is_ok_and(|v| v == "1")
}

/// A plain connection to `url` with `schema` first on its search path.
#[cfg(feature = "postgres")]
async fn postgres_client(url: &str, schema: &str) -> tokio_postgres::Client {
    let mut config: tokio_postgres::Config = url.parse().unwrap();
    config.options(format!("-c search_path=\"{schema}\""));
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// The same test on every backend: after `async fn what_it_checks(db: TestDb) { … }`,
/// `conformance!(what_it_checks);` makes a module of that name with one `#[tokio::test]` per
/// backend (`what_it_checks::sqlite`, `what_it_checks::postgres`), each calling the function
/// with a fresh database. `conformance!(what_it_checks, flavor = "multi_thread")` picks the
/// runtime's flavor. (The body stays a plain function, so rustfmt formats it.)
macro_rules! conformance {
    ($name:ident $(, flavor = $flavor:literal)?) => {
        mod $name {
            #[tokio::test$((flavor = $flavor))?]
            async fn sqlite() {
                let db = $crate::backends::TestDb::sqlite();
                super::$name(db.clone()).await;
                db.finish().await;
            }

            #[cfg(feature = "postgres")]
            #[tokio::test$((flavor = $flavor))?]
            async fn postgres() {
                let Some(db) = $crate::backends::TestDb::postgres(concat!(module_path!(), "::postgres")) else {
                    return;
                };
                super::$name(db.clone()).await;
                db.finish().await;
            }
        }
    };
}
pub(crate) use conformance;

/// Built without the `postgres` feature, the suite has no PostgreSQL tests: a run that must
/// test PostgreSQL says so rather than pass on SQLite alone.
#[cfg(not(feature = "postgres"))]
#[test]
fn postgres_is_tested_when_required() {
    assert!(
        !postgres_required(),
        "{REQUIRE_POSTGRES_VAR}=1 but agentry-store was built without its `postgres` feature: \
         run `cargo test -p agentry-store --features postgres`"
    );
}
