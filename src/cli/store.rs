//! `ebb store`: work on a store directly, with its servers stopped.

use crate::store::copy::{self, CopyError};
use crate::store::etcd::{Access, Endpoints};
use crate::store::{Location, Store};

use super::StoreCmd;
use super::client::CliError;

/// Runs an `ebb store` command.
pub fn run(cmd: StoreCmd) -> Result<(), CliError> {
    match cmd {
        StoreCmd::Copy {
            from,
            to,
            from_prefix,
            to_prefix,
            force,
            etcd_access,
        } => {
            let access = Access::from(etcd_access);
            let from = location("--from", &from, &from_prefix, &access)?;
            let to = location("--to", &to, &to_prefix, &access)?;
            if from == to {
                return Err(CliError::Usage("--from and --to are the same store".into()));
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| CliError::Usage(format!("cannot start: {e}")))?;
            let failed = |e: CopyError| CliError::Usage(e.to_string());
            // Opening may block (etcd's client runs on its own runtime): not inside this one.
            let source = Store::open_at(&from).map_err(|e| failed(e.into()))?;
            let target = Store::open_at(&to).map_err(|e| failed(e.into()))?;
            runtime.block_on(async {
                let copied = copy::copy(&source, &target, force).await.map_err(failed)?;
                let closed = target.close().await;
                let _ = source.close().await;
                closed.map_err(|e| failed(e.into()))?;
                println!("copied {} into {}", source.describe(), target.describe());
                for (table, n) in &copied {
                    println!("  {table:<12} {n}");
                }
                Ok(())
            })
        }
    }
}

/// `redb:DATA_DIR` or `etcd:URL[,URL...]`.
fn location(flag: &str, text: &str, prefix: &str, access: &Access) -> Result<Location, CliError> {
    let bad = |why: String| CliError::Usage(format!("{flag} {text}: {why}"));
    match text.split_once(':') {
        Some(("redb", dir)) if !dir.is_empty() => Ok(Location::Redb(dir.into())),
        Some(("etcd", urls)) => Endpoints::parse(urls, prefix, access.clone())
            .map(Location::Etcd)
            .map_err(bad),
        _ => Err(bad("write redb:DATA_DIR or etcd:URL[,URL...]".into())),
    }
}
