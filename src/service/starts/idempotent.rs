//! Idempotent starts: a start that carries an `Idempotency-Key` is recorded under it, in the
//! same write as its run, for [`KEPT`]. The same key again for the same program starts
//! nothing and answers as the first start did (its run id, or its refusal), also when the two
//! race and across servers; the same key with other arguments is refused.

use crate::model::invalid::Invalid;
use crate::model::property::Values;
use crate::model::run::RunKey;
use crate::store::{Read, StoreError, Table, Txn, keys};

/// How long a key is remembered (the history retention sweep drops it after).
pub const KEPT: std::time::Duration =
    std::time::Duration::from_secs(crate::runtime::retention::START_KEYS_KEPT);

/// The longest key taken, in bytes.
pub const MAX_KEY: usize = 255;

/// The header that carries the key.
pub const HEADER: &str = "Idempotency-Key";

/// The body field that may carry it instead (taken out of the runtime arguments).
pub const FIELD: &str = "idempotencyKey";

/// The key of a start: the header's, or the body's `idempotencyKey` (which is no runtime
/// argument, and is taken out of `args`); both given must agree.
pub fn of_request(header: Option<String>, args: &mut Values) -> Result<Option<String>, Invalid> {
    let field = args.remove(FIELD);
    match (header, field) {
        (Some(h), Some(f)) if h != f => Err(Invalid::new(
            FIELD,
            format!("differs from the {HEADER} header; give the key once"),
        )),
        (Some(key), _) => check(&key).map(|()| Some(key)),
        (None, Some(key)) => check(&key)
            .map(|()| Some(key))
            .map_err(|e| Invalid::new(FIELD, e.message)),
        (None, None) => Ok(None),
    }
}

/// What a key remembers of the start that used it first.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remembered {
    /// The run it recorded.
    pub run: String,
    /// A digest of its runtime arguments.
    pub arguments: String,
    /// When (epoch seconds).
    pub created: u64,
    /// Why it was refused, if it was (its run was recorded REJECTED).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// Checks a key as the header gave it: 1 to [`MAX_KEY`] visible ASCII characters.
pub fn check(key: &str) -> Result<(), Invalid> {
    if key.is_empty() || key.len() > MAX_KEY || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Invalid::new(
            HEADER,
            format!("must be 1 to {MAX_KEY} visible ASCII characters"),
        ));
    }
    Ok(())
}

/// Where key `key` of a start of `run`'s program is kept.
fn store_key(run: &RunKey, key: &str) -> String {
    keys::start_key(
        &run.namespace,
        &run.app,
        &run.program,
        &crate::model::run::sha256_hex(key.as_bytes()),
    )
}

/// A digest of `args` (sorted by name, so equal maps digest equally).
fn digest(args: &Values) -> String {
    let text = serde_json::to_string(args).unwrap_or_default();
    crate::model::run::sha256_hex(text.as_bytes())
}

/// What the first start with `key` for `run`'s program did, if it is remembered and not
/// older than [`KEPT`] at `now`; an error if it had other arguments.
pub fn earlier(
    tx: &Txn,
    run: &RunKey,
    key: &str,
    args: &Values,
    now: u64,
) -> Result<Option<Remembered>, crate::service::error::ServiceError> {
    let Some(first) = tx.get::<Remembered>(Table::StartKeys, &store_key(run, key))? else {
        return Ok(None);
    };
    if first.created.saturating_add(KEPT.as_secs()) < now {
        return Ok(None);
    }
    if first.arguments != digest(args) {
        return Err(crate::service::error::ServiceError::IdempotencyKeyReused { run: first.run });
    }
    Ok(Some(first))
}

/// Remembers that the start with `key` recorded `run` (refused for `refused`, if it was).
pub fn remember(
    tx: &mut Txn,
    run: &RunKey,
    key: &str,
    args: &Values,
    refused: Option<String>,
    now: u64,
) -> Result<(), StoreError> {
    let remembered = Remembered {
        run: run.run.clone(),
        arguments: digest(args),
        created: now,
        refused,
    };
    tx.put(Table::StartKeys, &store_key(run, key), &remembered)
}
