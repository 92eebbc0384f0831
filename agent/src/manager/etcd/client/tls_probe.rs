//! Why a TLS connection to a member fails, when the gRPC call cannot say: in TLS 1.3 the member
//! judges our client certificate only after the handshake, and its verdict (an alert) reaches
//! the HTTP/2 connection task, while the request just sees a cancelled stream. A probe
//! handshake with the same settings, followed by the HTTP/2 preface, reads that alert.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{crypto, ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// HTTP/2's connection preface and an empty SETTINGS frame: a healthy member answers with its
/// own SETTINGS at once, a member that refused our certificate with an alert.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// The PEM material the channel uses.
#[derive(Clone, Default)]
pub struct Material {
    pub ca: Option<Vec<u8>>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// Handshakes with `host:port` and returns the TLS error, if any, as text; `None` when TLS
/// works (or the probe itself could not tell: no answer, a bad URL).
pub async fn probe(host: &str, port: u16, material: &Material) -> Option<String> {
    let mut roots = RootCertStore::empty();
    if let Some(ca) = &material.ca {
        for cert in CertificateDer::pem_slice_iter(ca).flatten() {
            let _ = roots.add(cert);
        }
    }
    let builder = ClientConfig::builder_with_provider(Arc::new(crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots);
    let mut config = match &material.identity {
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(cert).flatten().collect();
            let key = PrivateKeyDer::from_pem_slice(key).ok()?;
            match builder.with_client_auth_cert(chain, key) {
                Ok(c) => c,
                Err(e) => return Some(format!("the client certificate or key is unusable: {e}")),
            }
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = ServerName::try_from(host.trim_matches(['[', ']']).to_string()).ok()?;
    let tcp = timeout(
        PROBE_TIMEOUT,
        TcpStream::connect((host.trim_matches(['[', ']']), port)),
    )
    .await
    .ok()?
    .ok()?;
    let mut tls = match timeout(
        PROBE_TIMEOUT,
        TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Some(e.to_string()),
        Err(_) => return None,
    };
    if let Ok(Err(e)) = timeout(PROBE_TIMEOUT, tls.write_all(H2_PREFACE)).await {
        return Some(e.to_string());
    }
    let mut buf = [0u8; 64];
    match timeout(PROBE_TIMEOUT, tls.read(&mut buf)).await {
        Ok(Err(e)) => Some(e.to_string()),
        _ => None,
    }
}
