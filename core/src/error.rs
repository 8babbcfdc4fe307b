//! The error type of the storage layer and everything built on it.

use std::path::PathBuf;

/// What went wrong in `cairn_core`. Callers branch on the variant, never on the message.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// SQLite refused or failed a statement.
    #[error("database error: {e}{advice}", e = .0, advice = permission_advice(.0))]
    Sqlite(#[from] rusqlite::Error),

    /// A file or directory could not be read, written or created.
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The database was written by a newer cairn; it is left untouched.
    #[error(
        "database {} has schema version {found}, newer than this cairn supports ({supported}); upgrade cairn",
        path.display()
    )]
    SchemaTooNew {
        path: PathBuf,
        found: i64,
        supported: i64,
    },

    /// An older database that this process leaves for another to upgrade: a hook does not
    /// run a migration, which may rebuild indexes for seconds (`OpenOptions::upgrade`).
    #[error(
        "database {} is at schema version {found}, this cairn writes version {supported}: the worker or the next cairn command upgrades it",
        path.display()
    )]
    UpgradePending {
        path: PathBuf,
        found: i64,
        supported: i64,
    },

    /// The file is not a cairn database (another program's, or not SQLite at all).
    #[error("database {} is not a usable cairn database: {reason}", path.display())]
    NotADatabase { path: PathBuf, reason: String },

    /// The database file is damaged: SQLite reports it corrupt or not a database any more
    /// (a broken header, page or WAL). Automatic recovery applies (`store::recover`).
    #[error("database {} is damaged: {reason}", path.display())]
    Damaged { path: PathBuf, reason: String },

    /// The database stayed locked by other writers past the busy timeout.
    #[error("database {} is locked by another process", path.display())]
    Locked { path: PathBuf },

    /// A settings file or value is invalid.
    #[error("{0}")]
    Settings(String),

    /// The sentence model could not be found, loaded, fetched or run.
    #[error("{0}")]
    Embedding(String),

    /// A caller passed something the operation cannot accept.
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        Error::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// True when the failure is SQLite reporting a lock it waited on in vain.
    pub fn is_busy(&self) -> bool {
        match self {
            Error::Locked { .. } => true,
            Error::Sqlite(e) => is_busy(e),
            _ => false,
        }
    }
}

impl Error {
    /// True when the failure says the database file is damaged: automatic recovery
    /// applies (`store::recover`). The one classifier every path that reads or writes the
    /// database uses (the hook's spool ingestion, the claimer, the writer, housekeeping,
    /// the CLI), so that any of them leads to recovery. See [`is_damage`].
    pub fn is_corrupt(&self) -> bool {
        match self {
            Error::Damaged { .. } => true,
            Error::Sqlite(e) => is_damage(e),
            _ => false,
        }
    }
}

/// True when a rusqlite error says the database file is damaged: SQLITE_CORRUPT (a
/// malformed page, index or WAL), SQLITE_NOTADB (a broken header), or a read that ran past
/// the end of the file (SQLITE_IOERR_SHORT_READ: a truncated file). Other I/O errors (a
/// full disk, a read-only or vanished mount) are not damage: recovering would not help.
pub fn is_damage(e: &rusqlite::Error) -> bool {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => {
            matches!(
                f.code,
                rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
            ) || f.extended_code == rusqlite::ffi::SQLITE_IOERR_SHORT_READ
        }
        _ => false,
    }
}

/// True when a rusqlite error is SQLITE_BUSY or SQLITE_LOCKED.
pub fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy) | Some(rusqlite::ErrorCode::DatabaseLocked)
    )
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
/// What to do about a database this user may not write or open: nothing for other errors.
fn permission_advice(e: &rusqlite::Error) -> &'static str {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::ReadOnly)
        | Some(rusqlite::ErrorCode::PermissionDenied)
        | Some(rusqlite::ErrorCode::CannotOpen) => {
            " (this user cannot write the data dir or its database: its file system may be \
             read-only, or check their owner and permissions; one made by `sudo cairn …` \
             belongs to root)"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_this_user_cannot_write_says_what_to_check() {
        let failure = |code: i32| {
            Error::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(code),
                Some("attempt to write a readonly database".into()),
            ))
            .to_string()
        };
        let readonly = failure(rusqlite::ffi::SQLITE_READONLY);
        assert!(readonly.contains("readonly database"), "{readonly}");
        assert!(
            readonly.contains("check their owner and permissions"),
            "{readonly}"
        );
        assert!(failure(rusqlite::ffi::SQLITE_CANTOPEN).contains("owner and permissions"));
        // Other errors say only what they are.
        assert!(!failure(rusqlite::ffi::SQLITE_CONSTRAINT).contains("permissions"));
    }
}
