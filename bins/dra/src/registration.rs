//! The kubelet's plugin registration: how the kubelet learns that a DRA driver exists.
//!
//! The kubelet's plugin watcher finds our socket in `plugins_registry/`, calls `GetInfo`, and,
//! once its DRA manager has accepted or refused the driver, tells us with
//! `NotifyRegistrationStatus`. [`RegistrationService`] answers `GetInfo` with the driver name, the
//! node service's socket (which the kubelet dials for `NodePrepareResources`) and the versions of
//! [`crate::api::SUPPORTED_VERSIONS`], and publishes what the kubelet reported as a
//! [`RegistrationState`] on a `watch` channel, so the driver can wait for registration and
//! notice a refusal without polling.

use std::path::{Path, PathBuf};

use tokio::sync::watch;
use tonic::service::Routes;
use tonic::{Request, Response, Status};
use tracing::{debug, info, warn};

use crate::api::pluginregistration::registration_server::{Registration, RegistrationServer};
use crate::api::pluginregistration::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use crate::api::{PLUGIN_TYPE, SUPPORTED_VERSIONS};
use crate::metrics::DraMetrics;

/// The longest error text from the kubelet that is kept and logged, in bytes.
pub const MAX_ERROR_LEN: usize = 1024;

/// What the driver logs each time the kubelet confirms its registration (a kubelet restart
/// registers it again): tests and operators look for it.
pub const REGISTERED: &str = "the kubelet registered devinject-dra";

/// What the kubelet last said about our registration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RegistrationState {
    /// The kubelet has not reported yet.
    #[default]
    Waiting,
    /// The kubelet registered the driver: it will call the node service.
    Registered,
    /// The kubelet refused the driver, with its reason (bounded by [`MAX_ERROR_LEN`]).
    Refused(String),
}

/// Why the registration service could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    /// The node service endpoint is relative; the kubelet dials it as given.
    #[error(
        "DRA service socket {endpoint} is relative: the kubelet dials the endpoint as given, \
         so give the absolute path as the kubelet sees it"
    )]
    RelativeEndpoint {
        /// The endpoint as given.
        endpoint: PathBuf,
    },
    /// The node service endpoint is not UTF-8, which `PluginInfo.endpoint` must be.
    #[error("DRA service socket {endpoint} is not valid UTF-8; choose a path in UTF-8")]
    NonUtf8Endpoint {
        /// The endpoint as given.
        endpoint: PathBuf,
    },
    /// The driver name is empty.
    #[error("the DRA driver name is empty; configure a driver name such as devinject.io")]
    EmptyDriver,
}

/// The `Registration` service of one DRA driver.
#[derive(Debug)]
pub struct RegistrationService {
    driver: String,
    endpoint: String,
    state: watch::Sender<RegistrationState>,
    /// How many times the kubelet has registered the driver: every registration, a restarted
    /// kubelet's included, is a change, where the state may stay `Registered`.
    registrations: watch::Sender<u64>,
    metrics: DraMetrics,
}

impl RegistrationService {
    /// A service registering `driver`, whose node service the kubelet dials at `endpoint`: the
    /// absolute path of the DRA service socket as the kubelet sees it.
    pub fn new(driver: &str, endpoint: &Path) -> Result<Self, RegistrationError> {
        if driver.is_empty() {
            return Err(RegistrationError::EmptyDriver);
        }
        if !endpoint.is_absolute() {
            return Err(RegistrationError::RelativeEndpoint {
                endpoint: endpoint.to_owned(),
            });
        }
        let endpoint = endpoint
            .to_str()
            .ok_or_else(|| RegistrationError::NonUtf8Endpoint {
                endpoint: endpoint.to_owned(),
            })?
            .to_owned();
        Ok(Self {
            driver: driver.to_owned(),
            endpoint,
            state: watch::Sender::new(RegistrationState::Waiting),
            registrations: watch::Sender::new(0),
            metrics: DraMetrics::default(),
        })
    }

    /// The same service, counting what the kubelet says into `metrics`.
    pub fn with_metrics(mut self, metrics: DraMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// A receiver of the registration state; it sees a new value only when the state changes.
    pub fn subscribe(&self) -> watch::Receiver<RegistrationState> {
        self.state.subscribe()
    }

    /// A receiver of the count of registrations: it sees every registration, a kubelet's
    /// restart included, after which the driver publishes its ResourceSlices again.
    pub fn subscribe_registrations(&self) -> watch::Receiver<u64> {
        self.registrations.subscribe()
    }

    /// What `GetInfo` answers.
    pub fn info(&self) -> PluginInfo {
        PluginInfo {
            r#type: PLUGIN_TYPE.to_owned(),
            name: self.driver.clone(),
            endpoint: self.endpoint.clone(),
            supported_versions: SUPPORTED_VERSIONS.iter().map(|&v| v.to_owned()).collect(),
        }
    }

    /// The service as routes to serve on the registration socket
    /// ([`devinject_kubelet::serve::serve()`]). Subscribe before: the service moves into the
    /// routes.
    pub fn into_routes(self) -> Routes {
        Routes::new(RegistrationServer::new(self))
    }

    fn record(&self, status: RegistrationStatus) {
        self.metrics.registration(status.plugin_registered);
        let next = if status.plugin_registered {
            if status.error.is_empty() {
                info!(driver = %self.driver, "{REGISTERED}");
            } else {
                let error = bounded(status.error);
                warn!(driver = %self.driver, %error, "registered with the kubelet, which reported an error");
            }
            self.registrations.send_modify(|n| *n += 1);
            RegistrationState::Registered
        } else {
            let error = if status.error.is_empty() {
                "the kubelet gave no reason".to_owned()
            } else {
                bounded(status.error)
            };
            warn!(driver = %self.driver, %error, "the kubelet refused the registration");
            RegistrationState::Refused(error)
        };
        self.state.send_if_modified(|state| {
            let changed = *state != next;
            *state = next;
            changed
        });
    }
}

/// `text` cut to at most [`MAX_ERROR_LEN`] bytes on a character boundary.
fn bounded(mut text: String) -> String {
    if text.len() > MAX_ERROR_LEN {
        let mut end = MAX_ERROR_LEN;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn get_info(&self, _: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        debug!(driver = %self.driver, endpoint = %self.endpoint, "GetInfo");
        Ok(Response::new(self.info()))
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        self.record(request.into_inner());
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}

#[cfg(test)]
mod tests {
    use devinject_kubelet::serve::{connect, serve};

    use super::*;
    use crate::api::pluginregistration::registration_client::RegistrationClient;

    #[test]
    fn the_endpoint_must_be_absolute_and_the_driver_named() {
        let err =
            RegistrationService::new("devinject.io", Path::new("plugins/x/dra.sock")).unwrap_err();
        assert!(
            matches!(err, RegistrationError::RelativeEndpoint { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("plugins/x/dra.sock"), "{err}");
        let err = RegistrationService::new("", Path::new("/x.sock")).unwrap_err();
        assert!(matches!(err, RegistrationError::EmptyDriver), "{err:?}");
    }

    #[test]
    fn long_kubelet_errors_are_cut_on_a_character_boundary() {
        let text = "é".repeat(MAX_ERROR_LEN);
        let cut = bounded(text);
        assert_eq!(cut.len(), MAX_ERROR_LEN);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(bounded("short".into()), "short");
    }

    #[tokio::test]
    async fn get_info_and_status_over_the_registration_socket() {
        let temp = tempfile::tempdir().unwrap();
        let endpoint = temp.path().join("plugins/devinject.io/dra.sock");
        let registry = temp.path().join("plugins_registry/devinject.io-reg.sock");
        let service = RegistrationService::new("devinject.io", &endpoint).unwrap();
        let mut state = service.subscribe();
        let mut registrations = service.subscribe_registrations();
        assert_eq!(*state.borrow_and_update(), RegistrationState::Waiting);
        let served = serve(&registry, service.into_routes()).await.unwrap();

        let mut client = RegistrationClient::new(connect(&registry).await.unwrap());
        let info = client.get_info(InfoRequest {}).await.unwrap().into_inner();
        assert_eq!(info.r#type, "DRAPlugin");
        assert_eq!(info.name, "devinject.io");
        assert_eq!(info.endpoint, endpoint.to_str().unwrap());
        assert_eq!(
            info.supported_versions,
            [
                "v1.DRAPlugin",
                "v1beta1.DRAPlugin",
                "v1.DRAResourceHealth",
                "v1alpha1.DRAResourceHealth"
            ]
        );

        client
            .notify_registration_status(RegistrationStatus {
                plugin_registered: false,
                error: "version not supported".into(),
            })
            .await
            .unwrap();
        state.changed().await.unwrap();
        assert_eq!(
            *state.borrow_and_update(),
            RegistrationState::Refused("version not supported".into())
        );

        client
            .notify_registration_status(RegistrationStatus {
                plugin_registered: true,
                error: String::new(),
            })
            .await
            .unwrap();
        state.changed().await.unwrap();
        assert_eq!(*state.borrow_and_update(), RegistrationState::Registered);

        // The same report again changes nothing, so watchers are not woken.
        client
            .notify_registration_status(RegistrationStatus {
                plugin_registered: true,
                error: String::new(),
            })
            .await
            .unwrap();
        assert!(!state.has_changed().unwrap());
        // But it is a registration again (a restarted kubelet's): the slices are re-published.
        assert!(registrations.has_changed().unwrap());
        assert_eq!(*registrations.borrow_and_update(), 2);

        drop(client);
        served.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn a_refusal_without_a_reason_still_says_so() {
        let service = RegistrationService::new("devinject.io", Path::new("/x.sock")).unwrap();
        let state = service.subscribe();
        service.record(RegistrationStatus {
            plugin_registered: false,
            error: String::new(),
        });
        assert_eq!(
            *state.borrow(),
            RegistrationState::Refused("the kubelet gave no reason".into())
        );
    }
}
