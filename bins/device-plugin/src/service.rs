//! The `DevicePlugin` gRPC service for one resource, served on the resource's own socket.
//!
//! `ListAndWatch` streams from the resource's `watch` channel: the current list at once, then a
//! new full list whenever the health monitor publishes a change. The stream ends in three ways,
//! which the lifecycle must tell apart:
//! - the plugin is shutting down: the last message is an empty list (the only way to withdraw
//!   devices), then the stream ends;
//! - the incarnation is being replaced: the stream ends without a message;
//! - the kubelet went away: the stream is dropped while still live, and the lifecycle is told,
//!   because the kubelet never dials back by itself (kubernetes#125501).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::WatchStream;
use tokio_stream::Stream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::{Request, Response, Status};
use tracing::{debug, info};

use crate::advertisement::Advertisement;
use crate::allocate;
use crate::api::v1beta1::device_plugin_server::DevicePlugin;
use crate::api::v1beta1::{
    AllocateRequest, AllocateResponse, ContainerPreferredAllocationResponse, DevicePluginOptions,
    Empty, ListAndWatchResponse, PreStartContainerRequest, PreStartContainerResponse,
    PreferredAllocationRequest, PreferredAllocationResponse,
};
use crate::error::PluginError;
use crate::metrics::PluginMetrics;
use crate::preferred::{self, Candidate};
use crate::resource::ResourceConfig;

/// The options this plugin registers with and answers `GetDevicePluginOptions` with.
pub fn options() -> DevicePluginOptions {
    DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}

/// The `DevicePlugin` service of one incarnation of one resource.
pub struct DevicePluginService {
    resource: Arc<ResourceConfig>,
    devices: watch::Receiver<Arc<Advertisement>>,
    stop_streams: CancellationToken,
    stream_dropped: mpsc::UnboundedSender<()>,
    metrics: PluginMetrics,
}

impl DevicePluginService {
    /// The answer to `Allocate`: one response per container request, or the first refusal.
    fn answer_allocate(&self, request: &AllocateRequest) -> Result<AllocateResponse, PluginError> {
        let advertisement = self.current()?;
        let mut container_responses = Vec::new();
        for (index, container) in request.container_requests.iter().enumerate() {
            let response = allocate::container_response(
                &self.resource,
                &advertisement,
                &container.devices_ids,
                index,
            )?;
            debug!(devices = ?container.devices_ids, "allocated");
            container_responses.push(response);
        }
        Ok(AllocateResponse {
            container_responses,
        })
    }

    /// A service answering from `devices`. Streams end quietly when `stop_streams` is
    /// cancelled; a stream dropped by the client while live is reported on `stream_dropped`.
    pub fn new(
        resource: Arc<ResourceConfig>,
        devices: watch::Receiver<Arc<Advertisement>>,
        stop_streams: CancellationToken,
        stream_dropped: mpsc::UnboundedSender<()>,
    ) -> Self {
        Self {
            resource,
            devices,
            stop_streams,
            stream_dropped,
            metrics: PluginMetrics::default(),
        }
    }

    /// The same service, counting its answers into `metrics`.
    pub fn with_metrics(mut self, metrics: PluginMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Counts a refusal and hands it on.
    fn refused(&self, err: PluginError) -> PluginError {
        self.metrics
            .refused(&self.resource.resource_name, err.reason());
        err
    }

    fn current(&self) -> Result<Arc<Advertisement>, PluginError> {
        let current = self.devices.borrow().clone();
        if current.is_closing() {
            return Err(PluginError::ShuttingDown {
                resource: self.resource.resource_name.clone(),
            });
        }
        Ok(current)
    }

    fn preferred(
        &self,
        advertisement: &Advertisement,
        available: &[String],
        must_include: &[String],
        size: i32,
    ) -> Result<Vec<String>, PluginError> {
        let mut positions = Vec::with_capacity(available.len() + must_include.len());
        for id in available.iter().chain(must_include) {
            let position =
                advertisement
                    .position(id)
                    .ok_or_else(|| PluginError::UnknownDevice {
                        resource: self.resource.resource_name.clone(),
                        id: id.clone(),
                    })?;
            positions.push(position);
        }
        positions.sort_unstable();
        positions.dedup();
        let size_ok = usize::try_from(size)
            .ok()
            .filter(|&s| s >= 1 && s <= positions.len());
        let Some(size) = size_ok else {
            return Err(PluginError::BadAllocationSize {
                resource: self.resource.resource_name.clone(),
                size: size.into(),
                available: positions.len(),
            });
        };
        let candidates: Vec<Candidate<'_>> = positions
            .iter()
            .map(|&p| {
                let advertised = &advertisement.ids()[p];
                let device = &advertisement.physical()[advertised.physical];
                Candidate {
                    id: &advertised.id,
                    numa_node: device.numa_node,
                    group: None,
                    device: &device.id,
                }
            })
            .collect();
        let must: Vec<&str> = must_include.iter().map(String::as_str).collect();
        Ok(preferred::choose(&candidates, &must, size)
            .into_iter()
            .map(str::to_owned)
            .collect())
    }
}

#[tonic::async_trait]
impl DevicePlugin for DevicePluginService {
    type ListAndWatchStream = DeviceStream;

    async fn get_device_plugin_options(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        debug!(resource = %self.resource.resource_name, "GetDevicePluginOptions");
        Ok(Response::new(options()))
    }

    async fn list_and_watch(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        info!(resource = %self.resource.resource_name, "ListAndWatch stream opened");
        Ok(Response::new(DeviceStream {
            resource: self.resource.clone(),
            updates: WatchStream::new(self.devices.clone()),
            stop: Box::pin(self.stop_streams.clone().cancelled_owned()),
            finished: false,
            dropped: Some(self.stream_dropped.clone()),
        }))
    }

    #[tracing::instrument(name = "get_preferred_allocation", skip_all,
        fields(resource = %self.resource.resource_name))]
    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let advertisement = self.current().map_err(|e| self.refused(e))?;
        let mut container_responses = Vec::new();
        for container in request.into_inner().container_requests {
            let chosen = self
                .preferred(
                    &advertisement,
                    &container.available_device_i_ds,
                    &container.must_include_device_i_ds,
                    container.allocation_size,
                )
                .map_err(|e| self.refused(e))?;
            debug!(devices = ?chosen, size = container.allocation_size, "preferred");
            container_responses.push(ContainerPreferredAllocationResponse {
                device_i_ds: chosen,
            });
        }
        Ok(Response::new(PreferredAllocationResponse {
            container_responses,
        }))
    }

    #[tracing::instrument(name = "allocate", skip_all,
        fields(resource = %self.resource.resource_name))]
    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let started = Instant::now();
        let answer = self.answer_allocate(&request.into_inner());
        let resource = &self.resource.resource_name;
        match &answer {
            Ok(answer) => self
                .metrics
                .allocated(resource, answer.container_responses.len()),
            Err(err) => {
                info!(error = %err, "allocate refused");
                self.metrics.refused(resource, err.reason());
            }
        }
        self.metrics.allocate_took(resource, started.elapsed());
        Ok(Response::new(answer?))
    }

    async fn pre_start_container(
        &self,
        _request: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        // Not required (`pre_start_required` is false); answered for kubelets that call anyway.
        Ok(Response::new(PreStartContainerResponse {}))
    }
}

/// The `ListAndWatch` stream: one full list per published change.
pub struct DeviceStream {
    resource: Arc<ResourceConfig>,
    updates: WatchStream<Arc<Advertisement>>,
    stop: Pin<Box<WaitForCancellationFutureOwned>>,
    finished: bool,
    /// Present while the stream is live; its drop then tells the lifecycle.
    dropped: Option<mpsc::UnboundedSender<()>>,
}

impl DeviceStream {
    fn finish(&mut self) {
        self.finished = true;
        self.dropped = None;
    }
}

impl Stream for DeviceStream {
    type Item = Result<ListAndWatchResponse, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        // Updates first: the closing list must go out even when the stop comes with it.
        match Pin::new(&mut this.updates).poll_next(cx) {
            Poll::Ready(Some(advertisement)) => {
                if advertisement.is_closing() {
                    this.finish();
                }
                let response = advertisement.to_response();
                debug!(resource = %this.resource.resource_name, devices = response.devices.len(),
                    "ListAndWatch send");
                return Poll::Ready(Some(Ok(response)));
            }
            Poll::Ready(None) => {
                this.finish();
                return Poll::Ready(None);
            }
            Poll::Pending => {}
        }
        if this.stop.as_mut().poll(cx).is_ready() {
            this.finish();
            return Poll::Ready(None);
        }
        Poll::Pending
    }
}

impl Drop for DeviceStream {
    fn drop(&mut self) {
        if let Some(dropped) = self.dropped.take() {
            info!(resource = %self.resource.resource_name, "ListAndWatch stream closed by the kubelet");
            // The lifecycle may already be gone (shutdown); nothing to tell then.
            let _ = dropped.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use devinject_kubelet::connections;
    use devinject_kubelet::serve::{connect, serve};
    use tonic::service::Routes;

    use super::*;
    use crate::api::v1beta1::device_plugin_client::DevicePluginClient;
    use crate::api::v1beta1::device_plugin_server::DevicePluginServer;
    use crate::resource::tests::demo;
    use crate::resource::AllocateMode;

    /// What the kubelet's call may take whatever else is open on the socket. The behaviour is
    /// itself a deadline: the kubelet gives up on a plugin call after its own timeout.
    const ANSWER_WITHIN: Duration = Duration::from_secs(1);

    #[tokio::test]
    async fn a_call_behind_idle_connections_is_answered_and_the_server_holds_the_cap() {
        let cap = connections::Limits::default().connections;
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("devinject-demo.sock");
        let (_publish, devices) = watch::channel(Arc::new(Advertisement::new(1)));
        let (dropped, _streams) = mpsc::unbounded_channel();
        let resource = Arc::new(demo(AllocateMode::Envvar, 1));
        let service =
            DevicePluginService::new(resource, devices, CancellationToken::new(), dropped);
        let served = serve(&path, Routes::new(DevicePluginServer::new(service)))
            .await
            .unwrap();
        let mut flood = Vec::new();
        for _ in 0..100 {
            flood.push(tokio::net::UnixStream::connect(&path).await.unwrap());
        }
        let call = async {
            let channel = connect(&path).await.unwrap();
            DevicePluginClient::new(channel)
                .get_device_plugin_options(Empty {})
                .await
                .unwrap()
                .into_inner()
        };
        let answer = tokio::time::timeout(ANSWER_WITHIN, call)
            .await
            .expect("GetDevicePluginOptions answered within a second beside 100 idle connections");
        assert_eq!(answer, options());
        let held = devinject_testkit::sockets::held_at_path(&path);
        assert!(
            held <= cap,
            "{held} connections held for {} idle ones and a call, the cap is {cap}",
            flood.len()
        );
        drop(flood);
        served.shutdown().await.unwrap();
    }
}
