//! A small, blocking client for the Kubernetes CRI `runtime.v1` services (what kubelet speaks to
//! containerd or CRI-O), over gRPC on the runtime's unix socket: RuntimeService's Version,
//! Status and pod sandbox calls, and ImageService's ImageStatus.
//!
//! Only the calls and fields the suite's tests and benchmark use are defined, by hand, with the
//! field numbers of `k8s.io/cri-api` `pkg/apis/runtime/v1/api.proto`: no protoc and no build-time
//! code generation. Unknown fields a runtime sends back are skipped by prost, as protobuf
//! requires, so a newer runtime answers these messages fine.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use http::uri::PathAndQuery;
use tonic::client::Grpc;
use tonic::transport::{Channel, Endpoint};
use tonic_prost::ProstCodec;

#[derive(Clone, PartialEq, prost::Message)]
pub struct VersionRequest {
    #[prost(string, tag = "1")]
    pub version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct VersionResponse {
    #[prost(string, tag = "1")]
    pub version: String,
    #[prost(string, tag = "2")]
    pub runtime_name: String,
    #[prost(string, tag = "3")]
    pub runtime_version: String,
    #[prost(string, tag = "4")]
    pub runtime_api_version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusRequest {
    #[prost(bool, tag = "1")]
    pub verbose: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<RuntimeStatus>,
    /// With `verbose`: JSON documents by key (containerd: `cniconfig`, `config`, ...).
    #[prost(map = "string, string", tag = "2")]
    pub info: HashMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RuntimeStatus {
    #[prost(message, repeated, tag = "1")]
    pub conditions: Vec<RuntimeCondition>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RuntimeCondition {
    /// `RuntimeReady` or `NetworkReady` (the two kubelet requires).
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(bool, tag = "2")]
    pub status: bool,
    #[prost(string, tag = "3")]
    pub reason: String,
    #[prost(string, tag = "4")]
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Protocol {
    Tcp = 0,
    Udp = 1,
    Sctp = 2,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PortMapping {
    #[prost(enumeration = "Protocol", tag = "1")]
    pub protocol: i32,
    #[prost(int32, tag = "2")]
    pub container_port: i32,
    #[prost(int32, tag = "3")]
    pub host_port: i32,
    #[prost(string, tag = "4")]
    pub host_ip: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub namespace: String,
    #[prost(uint32, tag = "4")]
    pub attempt: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandboxConfig {
    /// cgroupfs-style parent of the sandbox's cgroup (kubelet: `/kubepods/.../pod<uid>`).
    #[prost(string, tag = "1")]
    pub cgroup_parent: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxConfig {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(string, tag = "2")]
    pub hostname: String,
    #[prost(string, tag = "3")]
    pub log_directory: String,
    #[prost(message, repeated, tag = "5")]
    pub port_mappings: Vec<PortMapping>,
    #[prost(map = "string, string", tag = "6")]
    pub labels: HashMap<String, String>,
    /// Where kubelet puts the pod's annotations (`kubernetes.io/ingress-bandwidth`, ...).
    #[prost(map = "string, string", tag = "7")]
    pub annotations: HashMap<String, String>,
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxRequest {
    #[prost(message, optional, tag = "1")]
    pub config: Option<PodSandboxConfig>,
    #[prost(string, tag = "2")]
    pub runtime_handler: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxResponse {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

/// The request of both StopPodSandbox and RemovePodSandbox (same single field).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxIdRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

/// StopPodSandboxResponse and RemovePodSandboxResponse: empty messages.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxStatusRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
    #[prost(bool, tag = "2")]
    pub verbose: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum PodSandboxState {
    SandboxReady = 0,
    SandboxNotready = 1,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodIp {
    #[prost(string, tag = "1")]
    pub ip: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxNetworkStatus {
    #[prost(string, tag = "1")]
    pub ip: String,
    #[prost(message, repeated, tag = "2")]
    pub additional_ips: Vec<PodIp>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxStatus {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(enumeration = "PodSandboxState", tag = "3")]
    pub state: i32,
    #[prost(int64, tag = "4")]
    pub created_at: i64,
    #[prost(message, optional, tag = "5")]
    pub network: Option<PodSandboxNetworkStatus>,
    #[prost(map = "string, string", tag = "7")]
    pub labels: HashMap<String, String>,
    #[prost(map = "string, string", tag = "8")]
    pub annotations: HashMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxStatusResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<PodSandboxStatus>,
    /// With `verbose`: containerd puts one JSON document under `info` (pid, runtime spec, ...).
    #[prost(map = "string, string", tag = "2")]
    pub info: HashMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxStateValue {
    #[prost(enumeration = "PodSandboxState", tag = "1")]
    pub state: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxFilter {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "2")]
    pub state: Option<PodSandboxStateValue>,
    #[prost(map = "string, string", tag = "3")]
    pub label_selector: HashMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodSandboxRequest {
    #[prost(message, optional, tag = "1")]
    pub filter: Option<PodSandboxFilter>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandbox {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(enumeration = "PodSandboxState", tag = "3")]
    pub state: i32,
    #[prost(int64, tag = "4")]
    pub created_at: i64,
    #[prost(map = "string, string", tag = "5")]
    pub labels: HashMap<String, String>,
    #[prost(map = "string, string", tag = "6")]
    pub annotations: HashMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodSandboxResponse {
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<PodSandbox>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageSpec {
    #[prost(string, tag = "1")]
    pub image: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageStatusRequest {
    #[prost(message, optional, tag = "1")]
    pub image: Option<ImageSpec>,
    #[prost(bool, tag = "2")]
    pub verbose: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Image {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, repeated, tag = "2")]
    pub repo_tags: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageStatusResponse {
    /// `None` when the runtime does not have the image.
    #[prost(message, optional, tag = "1")]
    pub image: Option<Image>,
}

/// Why a CRI call failed.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("cannot start the CRI client's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("bad CRI endpoint unix:{path}: {source}")]
    Endpoint {
        path: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("CRI {method} on {socket}: transport not ready: {source}")]
    NotReady {
        method: &'static str,
        socket: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("CRI {method} on {socket} failed: {code:?}: {message}")]
    Call {
        method: &'static str,
        socket: String,
        code: tonic::Code,
        message: String,
    },
}

/// A connection to one runtime's CRI socket; every call blocks until the runtime answers or
/// the per-call timeout passes.
pub struct CriClient {
    runtime: tokio::runtime::Runtime,
    grpc: Grpc<Channel>,
    socket: String,
}

impl CriClient {
    /// A client for the CRI socket at `socket`. The connection is made on the first call (and
    /// re-made after the runtime restarts); each call fails after `timeout`.
    pub fn new(socket: &Path, timeout: Duration) -> Result<CriClient, CriError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(CriError::Runtime)?;
        let path = socket.display().to_string();
        let endpoint =
            Endpoint::from_shared(format!("unix:{path}")).map_err(|source| CriError::Endpoint {
                path: path.clone(),
                source,
            })?;
        let channel = {
            // connect_lazy spawns the connection task: it needs the runtime's context.
            let _guard = runtime.enter();
            endpoint
                .connect_timeout(Duration::from_secs(5))
                .timeout(timeout)
                .connect_lazy()
        };
        Ok(CriClient {
            runtime,
            grpc: Grpc::new(channel),
            socket: path,
        })
    }

    fn call<Req, Resp>(&mut self, method: &'static str, request: Req) -> Result<Resp, CriError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let path = PathAndQuery::from_static(method);
        let socket = &self.socket;
        let grpc = &mut self.grpc;
        self.runtime.block_on(async {
            grpc.ready().await.map_err(|source| CriError::NotReady {
                method,
                socket: socket.clone(),
                source,
            })?;
            grpc.unary(
                tonic::Request::new(request),
                path,
                ProstCodec::<Req, Resp>::default(),
            )
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| CriError::Call {
                method,
                socket: socket.clone(),
                code: status.code(),
                message: status.message().to_string(),
            })
        })
    }

    pub fn version(&mut self) -> Result<VersionResponse, CriError> {
        self.call(
            "/runtime.v1.RuntimeService/Version",
            VersionRequest {
                version: "v1".into(),
            },
        )
    }

    pub fn status(&mut self, verbose: bool) -> Result<StatusResponse, CriError> {
        self.call(
            "/runtime.v1.RuntimeService/Status",
            StatusRequest { verbose },
        )
    }

    /// The `NetworkReady` condition (`None` when the runtime reports none).
    pub fn network_ready(&mut self) -> Result<Option<RuntimeCondition>, CriError> {
        let status = self.status(false)?;
        Ok(status
            .status
            .into_iter()
            .flat_map(|s| s.conditions)
            .find(|c| c.r#type == "NetworkReady"))
    }

    /// RunPodSandbox with the default runtime handler; returns the sandbox ID.
    pub fn run_pod_sandbox(&mut self, config: PodSandboxConfig) -> Result<String, CriError> {
        let response: RunPodSandboxResponse = self.call(
            "/runtime.v1.RuntimeService/RunPodSandbox",
            RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: String::new(),
            },
        )?;
        Ok(response.pod_sandbox_id)
    }

    pub fn stop_pod_sandbox(&mut self, id: &str) -> Result<(), CriError> {
        let _: Empty = self.call(
            "/runtime.v1.RuntimeService/StopPodSandbox",
            PodSandboxIdRequest {
                pod_sandbox_id: id.into(),
            },
        )?;
        Ok(())
    }

    pub fn remove_pod_sandbox(&mut self, id: &str) -> Result<(), CriError> {
        let _: Empty = self.call(
            "/runtime.v1.RuntimeService/RemovePodSandbox",
            PodSandboxIdRequest {
                pod_sandbox_id: id.into(),
            },
        )?;
        Ok(())
    }

    pub fn pod_sandbox_status(
        &mut self,
        id: &str,
        verbose: bool,
    ) -> Result<PodSandboxStatusResponse, CriError> {
        self.call(
            "/runtime.v1.RuntimeService/PodSandboxStatus",
            PodSandboxStatusRequest {
                pod_sandbox_id: id.into(),
                verbose,
            },
        )
    }

    /// ImageService.ImageStatus: the image the runtime knows under `reference`, if any.
    pub fn image_status(&mut self, reference: &str) -> Result<Option<Image>, CriError> {
        let response: ImageStatusResponse = self.call(
            "/runtime.v1.ImageService/ImageStatus",
            ImageStatusRequest {
                image: Some(ImageSpec {
                    image: reference.into(),
                }),
                verbose: false,
            },
        )?;
        Ok(response.image)
    }

    pub fn list_pod_sandbox(
        &mut self,
        filter: Option<PodSandboxFilter>,
    ) -> Result<Vec<PodSandbox>, CriError> {
        let response: ListPodSandboxResponse = self.call(
            "/runtime.v1.RuntimeService/ListPodSandbox",
            ListPodSandboxRequest { filter },
        )?;
        Ok(response.items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn run_pod_sandbox_request_uses_the_cri_field_numbers() {
        let request = RunPodSandboxRequest {
            config: Some(PodSandboxConfig {
                hostname: "h".into(),
                port_mappings: vec![PortMapping {
                    protocol: Protocol::Udp as i32,
                    container_port: 80,
                    host_port: 8080,
                    host_ip: String::new(),
                }],
                ..Default::default()
            }),
            runtime_handler: String::new(),
        };
        let bytes = request.encode_to_vec();
        // config (1, length-delimited) { hostname (2) "h", port_mappings (5) { protocol (1)
        // = 1, container_port (2) = 80, host_port (3) = 8080 } }
        assert_eq!(
            bytes,
            [0x0a, 12, 0x12, 1, b'h', 0x2a, 7, 0x08, 1, 0x10, 80, 0x18, 0x90, 0x3f]
        );
    }

    #[test]
    fn pod_sandbox_status_response_decodes_and_skips_unknown_fields() {
        let status = PodSandboxStatus {
            id: "abc".into(),
            state: PodSandboxState::SandboxNotready as i32,
            network: Some(PodSandboxNetworkStatus {
                ip: "10.0.0.2".into(),
                additional_ips: Vec::new(),
            }),
            ..Default::default()
        };
        let mut bytes = PodSandboxStatusResponse {
            status: Some(status.clone()),
            info: HashMap::from([("info".into(), "{}".into())]),
        }
        .encode_to_vec();
        // containers_statuses (3) and timestamp (4), which this client does not define.
        bytes.extend_from_slice(&[0x1a, 0, 0x20, 7]);
        let decoded = PodSandboxStatusResponse::decode(bytes.as_slice()).expect("decode");
        assert_eq!(decoded.status, Some(status));
        assert_eq!(decoded.info["info"], "{}");
    }
}
