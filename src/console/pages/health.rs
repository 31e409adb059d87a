//! `/health`: what the gRPC health service reports (the same state, following the
//! database), for the server and for `ledger.v1.Ledger`. Open without a token:
//! it names nothing of the ledger's. 200 while both are SERVING, 503 otherwise.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::Health as _;

use super::super::frame::{Nav, html};
use super::super::state::Console;

#[derive(askama::Template)]
#[template(path = "health.html")]
struct HealthPage {
    nav: Nav,
    /// Each reported service, `server` for the whole, with its status.
    services: Vec<(&'static str, &'static str)>,
    serving: bool,
}

pub(crate) async fn page(State(console): State<Console>) -> Response {
    let mut services = Vec::new();
    let mut serving = true;
    for service in crate::health::SERVICES {
        let request = tonic::Request::new(HealthCheckRequest {
            service: service.to_owned(),
        });
        let status = match console.health().check(request).await {
            Ok(answer) => answer.into_inner().status(),
            Err(_) => ServingStatus::ServiceUnknown,
        };
        serving &= status == ServingStatus::Serving;
        let name = if service.is_empty() {
            "server"
        } else {
            service
        };
        services.push((name, status.as_str_name()));
    }
    let status = if serving {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let page = HealthPage {
        nav: Nav::anonymous(),
        services,
        serving,
    };
    html(status, &page)
}
