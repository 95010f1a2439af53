//! Routes of the server itself: health, the servers of the installation, the provisioners it
//! offers, its janitor.

use actix_web::{HttpRequest, web};

use crate::api::state::{Reply, State, flag, ok};
use crate::model::sweep::JanitorView;
use crate::service::error::ServiceError;

pub async fn health() -> Reply {
    ok(&serde_json::json!({"status": "ok"}))
}

pub async fn list_servers(state: State) -> Reply {
    ok(&crate::service::servers::list(&state.store).await?)
}

pub async fn list_provisioners(state: State) -> Reply {
    ok(&state.registry.details())
}

pub async fn get_provisioner(state: State, name: web::Path<String>) -> Reply {
    let name = name.into_inner();
    match state.registry.detail(&name) {
        Some(detail) => ok(&detail),
        None => Err(ServiceError::ProvisionerNotFound(name).into()),
    }
}

pub async fn get_janitor(state: State) -> Reply {
    let last = state.janitor.last().await?;
    ok(&JanitorView {
        settings: state.janitor.settings,
        last,
    })
}

pub async fn run_janitor(state: State, req: HttpRequest) -> Reply {
    let dry_run = flag(&req, "dryRun")?;
    ok(&state.janitor.sweep_now(dry_run).await?)
}
