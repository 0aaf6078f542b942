//! Cluster credentials: a cluster CA, the certificates it issues, and the
//! rustls configurations that accept only them.
//!
//! `rayrs start --head` creates a [`ClusterCa`]; every process of the
//! cluster holds [`ClusterCredentials`] issued by it: the CA certificate (the
//! only root it trusts), its own certificate and its private key. Servers
//! require a client certificate from the same CA, clients accept only a
//! server certificate from it, so a process without the cluster's
//! credentials cannot talk to it in either direction.
//!
//! Every certificate names [`SERVER_NAME`] in its subject alternative names,
//! and clients ask for that name, so certificates do not depend on addresses.
//!
//! On disk, a directory holds PEM files: `ca.pem` (the CA certificate),
//! `ca-key.pem` (the CA key, only where certificates are issued), `cert.pem`
//! and `key.pem` (a process's certificate chain and key). Keys are written
//! with mode 0600.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use super::TransportError;

/// The DNS name in every cluster certificate and the name clients verify.
pub const SERVER_NAME: &str = "ray-rs";

/// The ALPN protocol both ends announce; a peer speaking anything else fails
/// the TLS handshake.
pub const ALPN: &[u8] = b"ray-rs";

const CA_CERT_FILE: &str = "ca.pem";
const CA_KEY_FILE: &str = "ca-key.pem";
const CERT_FILE: &str = "cert.pem";
const KEY_FILE: &str = "key.pem";

/// A cluster's certificate authority: it issues [`ClusterCredentials`].
///
/// Its key is the cluster's secret: whoever holds it can join the cluster.
pub struct ClusterCa {
    cert: CertificateDer<'static>,
    key: KeyPair,
}

impl std::fmt::Debug for ClusterCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("ClusterCa").finish_non_exhaustive()
    }
}

impl ClusterCa {
    /// A new CA with a fresh ECDSA P-256 key.
    ///
    /// # Errors
    ///
    /// [`TransportError::Certificate`] if the key or certificate cannot be made.
    pub fn generate() -> Result<Self, TransportError> {
        let key = KeyPair::generate()?;
        let cert = ca_params(&key).self_signed(&key)?;
        Ok(Self {
            cert: cert.der().clone(),
            key,
        })
    }

    /// The CA certificate, the root every cluster member trusts.
    pub fn certificate(&self) -> &CertificateDer<'static> {
        &self.cert
    }

    /// Issues credentials for one process; `identity` (for example
    /// `node-3`) becomes its certificate's common name.
    ///
    /// # Errors
    ///
    /// [`TransportError::Certificate`] if the key or certificate cannot be made.
    pub fn issue(&self, identity: &str) -> Result<ClusterCredentials, TransportError> {
        let mut params = CertificateParams::new(vec![SERVER_NAME.to_owned()])?;
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, identity.to_owned());
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        // Every process both accepts and opens connections.
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;

        let key = KeyPair::generate()?;
        let issuer = Issuer::new(ca_params(&self.key), &self.key);
        let cert = params.signed_by(&key, &issuer)?;
        Ok(ClusterCredentials {
            ca: self.cert.clone(),
            chain: vec![cert.der().clone()],
            key: PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
        })
    }

    /// Writes `ca.pem` and `ca-key.pem` (mode 0600) into `dir`, creating it.
    ///
    /// # Errors
    ///
    /// [`TransportError::CredentialFile`] if a file cannot be written.
    pub fn save(&self, dir: &Path) -> Result<(), TransportError> {
        create_dir(dir)?;
        write_file(
            &dir.join(CA_CERT_FILE),
            pem_cert(&self.cert).as_bytes(),
            false,
        )?;
        write_file(
            &dir.join(CA_KEY_FILE),
            pem_encode("PRIVATE KEY", self.key.serialized_der()).as_bytes(),
            true,
        )
    }

    /// Reads the CA that [`ClusterCa::save`] wrote into `dir`.
    ///
    /// # Errors
    ///
    /// [`TransportError::CredentialFile`] if a file is missing or unreadable,
    /// [`TransportError::InvalidCredentials`] if it holds no valid
    /// certificate or key, or the key is not the certificate's.
    pub fn load(dir: &Path) -> Result<Self, TransportError> {
        let cert_path = dir.join(CA_CERT_FILE);
        let cert = read_one_cert(&cert_path)?;
        let key_path = dir.join(CA_KEY_FILE);
        let key_der = read_key(&key_path)?;
        let key = KeyPair::try_from(&key_der).map_err(|e| invalid(&key_path, e))?;
        // The subject public key info appears verbatim in the certificate it
        // belongs to; this catches a key saved next to another CA's cert.
        if !contains(&cert, &key.subject_public_key_info()) {
            return Err(invalid(
                &key_path,
                format!("the key does not belong to {}", cert_path.display()),
            ));
        }
        Ok(Self { cert, key })
    }
}

/// The parameters of a CA certificate for `key`.
///
/// They are a function of the key alone, so a CA loaded from disk issues
/// certificates that name exactly the issuer its saved certificate has.
fn ca_params(key: &KeyPair) -> CertificateParams {
    let mut params = CertificateParams::default();
    let key_id = params.key_identifier(key);
    let short: String = key_id.iter().take(8).map(|b| format!("{b:02x}")).collect();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("ray-rs cluster CA {short}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// What one cluster process needs to connect and be connected to: the
/// cluster CA certificate, its own certificate chain and its private key.
pub struct ClusterCredentials {
    ca: CertificateDer<'static>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Clone for ClusterCredentials {
    fn clone(&self) -> Self {
        Self {
            ca: self.ca.clone(),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl std::fmt::Debug for ClusterCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("ClusterCredentials")
            .field("chain_len", &self.chain.len())
            .finish_non_exhaustive()
    }
}

impl ClusterCredentials {
    /// The cluster CA certificate, the only root these credentials trust.
    pub fn ca_certificate(&self) -> &CertificateDer<'static> {
        &self.ca
    }

    /// This process's certificate chain, leaf first.
    pub fn certificate_chain(&self) -> &[CertificateDer<'static>] {
        &self.chain
    }

    /// Writes `ca.pem`, `cert.pem` and `key.pem` (mode 0600) into `dir`,
    /// creating it.
    ///
    /// # Errors
    ///
    /// [`TransportError::CredentialFile`] if a file cannot be written.
    pub fn save(&self, dir: &Path) -> Result<(), TransportError> {
        create_dir(dir)?;
        write_file(
            &dir.join(CA_CERT_FILE),
            pem_cert(&self.ca).as_bytes(),
            false,
        )?;
        let chain: String = self.chain.iter().map(pem_cert).collect();
        write_file(&dir.join(CERT_FILE), chain.as_bytes(), false)?;
        let key = pem_encode("PRIVATE KEY", self.key.secret_der());
        write_file(&dir.join(KEY_FILE), key.as_bytes(), true)
    }

    /// Reads the credentials [`ClusterCredentials::save`] wrote into `dir`
    /// and checks that rustls accepts them.
    ///
    /// # Errors
    ///
    /// [`TransportError::CredentialFile`] if a file is missing or unreadable,
    /// [`TransportError::InvalidCredentials`] if a file holds no valid PEM
    /// certificate or key, or rustls rejects them (for example a key that
    /// is not the certificate's).
    pub fn load(dir: &Path) -> Result<Self, TransportError> {
        let ca = read_one_cert(&dir.join(CA_CERT_FILE))?;
        let cert_path = dir.join(CERT_FILE);
        let chain = read_certs(&cert_path)?;
        let key = read_key(&dir.join(KEY_FILE))?;
        let creds = Self { ca, chain, key };
        // Surface a bad certificate or key now, with the directory named,
        // rather than at the first handshake.
        creds
            .server_config()
            .and_then(|_| creds.client_config())
            .map_err(|e| invalid(dir, e))?;
        Ok(creds)
    }

    /// A rustls server configuration for QUIC (TLS 1.3) that presents these
    /// credentials and **requires** a client certificate issued by the
    /// cluster CA.
    ///
    /// # Errors
    ///
    /// [`TransportError::TlsConfig`] if rustls rejects the certificate or key.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TransportError> {
        let provider = provider();
        let verifier = WebPkiClientVerifier::builder_with_provider(self.roots()?, provider.clone())
            .build()
            .map_err(tls_config)?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(tls_config)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(tls_config)?;
        config.alpn_protocols = vec![ALPN.to_vec()];
        Ok(Arc::new(config))
    }

    /// A rustls client configuration for QUIC (TLS 1.3) that presents these
    /// credentials and trusts only the cluster CA.
    ///
    /// # Errors
    ///
    /// [`TransportError::TlsConfig`] if rustls rejects the certificate or key.
    pub fn client_config(&self) -> Result<Arc<rustls::ClientConfig>, TransportError> {
        let mut config = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(tls_config)?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(tls_config)?;
        config.alpn_protocols = vec![ALPN.to_vec()];
        Ok(Arc::new(config))
    }

    /// A root store holding only the cluster CA.
    fn roots(&self) -> Result<Arc<RootCertStore>, TransportError> {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.clone()).map_err(tls_config)?;
        Ok(Arc::new(roots))
    }
}

/// ring, named explicitly: the process-wide default provider may be unset,
/// or set to another one by some other crate.
///
/// AES-128-GCM is offered first (ring's default order puts AES-256-GCM
/// first): every byte between nodes is sealed once and opened once, and
/// ring seals faster with it (figures in
/// `docs/perf-log/2026-11-figures-from-code-comments.md`). AES-128-GCM is TLS 1.3's mandatory
/// suite; the others stay on offer after it.
fn provider() -> Arc<CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider
        .cipher_suites
        .sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(provider)
}

fn tls_config(e: impl std::fmt::Display) -> TransportError {
    TransportError::TlsConfig(e.to_string())
}

fn invalid(path: &Path, reason: impl std::fmt::Display) -> TransportError {
    TransportError::InvalidCredentials {
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

fn file_error(path: &Path, source: std::io::Error) -> TransportError {
    TransportError::CredentialFile {
        path: path.to_owned(),
        source,
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TransportError> {
    fs::read(path).map_err(|e| file_error(path, e))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TransportError> {
    let certs = CertificateDer::pem_slice_iter(&read(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(path, e))?;
    if certs.is_empty() {
        return Err(invalid(path, "no CERTIFICATE section"));
    }
    Ok(certs)
}

fn read_one_cert(path: &Path) -> Result<CertificateDer<'static>, TransportError> {
    let mut certs = read_certs(path)?;
    if certs.len() != 1 {
        return Err(invalid(
            path,
            format!("expected one certificate, found {}", certs.len()),
        ));
    }
    Ok(certs.remove(0))
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TransportError> {
    PrivateKeyDer::from_pem_slice(&read(path)?).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => invalid(path, "no PRIVATE KEY section"),
        e => invalid(path, e),
    })
}

fn create_dir(dir: &Path) -> Result<(), TransportError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(|e| file_error(dir, e))
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a
/// reader never sees half a file; `secret` files get mode 0600 from birth.
fn write_file(path: &Path, bytes: &[u8], secret: bool) -> Result<(), TransportError> {
    let mut tmp = PathBuf::from(path);
    tmp.as_mut_os_string().push(".tmp");
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, if secret { 0o600 } else { 0o644 });
    #[cfg(not(unix))]
    let _ = secret;
    let result = options
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(file_error(path, e));
    }
    Ok(())
}

fn pem_cert(cert: &CertificateDer<'_>) -> String {
    pem_encode("CERTIFICATE", cert)
}

fn pem_encode(tag: &str, der: &[u8]) -> String {
    pem::encode(&pem::Pem::new(tag, der.to_vec()))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    #[test]
    fn aes_128_gcm_is_offered_first_and_the_other_suites_stay() {
        let ours = super::provider();
        let ring = rustls::crypto::ring::default_provider();
        assert_eq!(
            ours.cipher_suites[0].suite(),
            rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
        );
        assert_eq!(ours.cipher_suites.len(), ring.cipher_suites.len());
    }
}
