//! Sealing: authenticated encryption of the secrets the store keeps (signing keys, wallet keys,
//! queued mail: whatever must be recoverable rather than only checkable) under one master key,
//! AES-256-GCM.
//!
//! A sealed value is text, so it fits any column: unpadded base64url of
//! `version (1 byte) || nonce (12 bytes) || ciphertext || tag (16 bytes)`. The version byte
//! leaves room for another algorithm or a master-key rotation without guessing at old rows.
//!
//! The associated data (`aad`) is not stored; the caller passes the same value to `seal` and
//! `open`. It binds a sealed value to where it belongs: a purpose prefix and the row's identity
//! (`tokenops/signing-key/` and a `kid`, `tokenops/wallet-key/` and an address), so a value
//! copied into another row, or into another kind of row, does not open there.
//!
//! Nonces are 96 random bits from the OS. With random nonces one key may seal about 2^32 values
//! before a repeat becomes a concern (NIST SP 800-38D §8.3); the service seals a handful per
//! key rotation or client, far below that.

use aes_gcm::aead::{Aead, Payload};
use aes_gcm::{Aes256Gcm, KeyInit, Nonce};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use rand::RngCore;
use rand::rngs::OsRng;
use std::fmt;
use std::io;
use std::path::Path;
use zeroize::Zeroizing;

/// The format of sealed values this build writes: AES-256-GCM, 96-bit nonce, 128-bit tag.
const VERSION_AES256_GCM: u8 = 1;
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
const KEY_LEN: usize = 32;

/// Why a sealed value did not open. None of them says anything about the plaintext or the key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    #[error("the sealed value is not base64url, or too short to be one")]
    Malformed,
    #[error("the sealed value has format version {0}, which this build does not know")]
    UnknownVersion(u8),
    /// A wrong master key, a wrong `aad`, or a changed value: AES-GCM cannot tell them apart.
    #[error("the sealed value does not open with this key and associated data")]
    Unauthentic,
}

/// Why a master key's text was refused. Never carries the text itself.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a master key must be 32 bytes written as 64 hex digits or as base64/base64url (got {0})")]
pub struct KeyTextError(&'static str);

/// Seals and opens values under one AES-256 master key.
#[derive(Clone)]
pub struct Sealer {
    cipher: Aes256Gcm,
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key must never reach a log through a derived Debug.
        f.write_str("Sealer(AES-256-GCM, key redacted)")
    }
}

impl Sealer {
    pub fn new(key: [u8; KEY_LEN]) -> Self {
        let key = Zeroizing::new(key);
        Self { cipher: Aes256Gcm::new(&(*key).into()) }
    }

    /// A master key given as text (configuration, environment): 64 hex digits, or base64 /
    /// base64url with or without padding. Surrounding whitespace is ignored, so a key file may
    /// end with a newline.
    pub fn from_text(text: &str) -> Result<Sealer, KeyTextError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(KeyTextError("an empty text"));
        }
        // 64 characters of hex are also valid base64 (of 48 bytes), so hex is tried first.
        let bytes = if text.len() == 2 * KEY_LEN && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            Zeroizing::new(decode_hex(text).ok_or(KeyTextError("invalid hex"))?)
        } else {
            let decoded = [&URL_SAFE_NO_PAD, &URL_SAFE, &STANDARD_NO_PAD, &STANDARD]
                .iter()
                .find_map(|engine| engine.decode(text).ok())
                .ok_or(KeyTextError("neither hex nor base64"))?;
            Zeroizing::new(decoded)
        };
        let key: [u8; KEY_LEN] =
            bytes.as_slice().try_into().map_err(|_| KeyTextError("a length other than 32 bytes"))?;
        Ok(Sealer::new(key))
    }

    /// The development master key at `path`, created when missing: 32 bytes from the OS written
    /// as 64 hex digits with mode 0600. For a single node without a configured key, so
    /// `tokenops serve` needs nothing but the binary; it always warns, because a key lying next
    /// to the data it protects protects against little.
    pub fn load_or_create_dev_key(path: &Path) -> io::Result<Sealer> {
        let sealer = match std::fs::read(path) {
            Ok(contents) => {
                warn_if_readable_by_others(path);
                sealer_from_file(&contents)?
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => create_dev_key(path)?,
            Err(e) => return Err(e),
        };
        tracing::warn!(
            path = %path.display(),
            "a development master key is in use: secrets at rest are sealed with a key stored beside \
             them; configure a master key for production"
        );
        Ok(sealer)
    }

    /// Seals `plaintext`, bound to `aad`.
    pub fn seal(&self, plaintext: &[u8], aad: &[u8]) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        OsRng.fill_bytes(&mut nonce);
        self.seal_with_nonce(nonce, plaintext, aad)
    }

    fn seal_with_nonce(&self, nonce: [u8; NONCE_LEN], plaintext: &[u8], aad: &[u8]) -> String {
        let sealed = self
            .cipher
            .encrypt(&Nonce::from(nonce), Payload { msg: plaintext, aad })
            // AES-GCM refuses only plaintexts over 64 GiB; the values sealed here are bytes long.
            .expect("AES-256-GCM seals any value shorter than 64 GiB");
        let mut out = Vec::with_capacity(1 + NONCE_LEN + sealed.len());
        out.push(VERSION_AES256_GCM);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        URL_SAFE_NO_PAD.encode(out)
    }

    /// Opens a value `seal` made with the same key and `aad`.
    pub fn open(&self, sealed: &str, aad: &[u8]) -> Result<Zeroizing<Vec<u8>>, SealError> {
        let bytes = URL_SAFE_NO_PAD.decode(sealed.trim()).map_err(|_| SealError::Malformed)?;
        let (&version, rest) = bytes.split_first().ok_or(SealError::Malformed)?;
        if version != VERSION_AES256_GCM {
            return Err(SealError::UnknownVersion(version));
        }
        if rest.len() < NONCE_LEN + TAG_LEN {
            return Err(SealError::Malformed);
        }
        let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| SealError::Malformed)?;
        let plaintext = self
            .cipher
            .decrypt(&Nonce::from(nonce), Payload { msg: ciphertext, aad })
            .map_err(|_| SealError::Unauthentic)?;
        Ok(Zeroizing::new(plaintext))
    }
}

fn sealer_from_file(contents: &[u8]) -> io::Result<Sealer> {
    let contents = Zeroizing::new(contents.to_vec());
    let text = std::str::from_utf8(&contents)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "the master key file is not text"))?;
    Sealer::from_text(text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

/// Writes a new key to a temporary file, then links it into place. Linking fails when `path`
/// exists, so two processes starting together on one data directory agree on one key (the
/// loser reads the winner's), and a crash never leaves a half-written key at `path`.
fn create_dev_key(path: &Path) -> io::Result<Sealer> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut key = Zeroizing::new([0u8; KEY_LEN]);
    OsRng.fill_bytes(key.as_mut());
    let text = Zeroizing::new(format!("{}\n", encode_hex(key.as_ref())));
    let mut suffix = [0u8; 8];
    OsRng.fill_bytes(&mut suffix);
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".tmp-{}", encode_hex(&suffix)));
    let temporary = Path::new(&temporary);
    write_private(temporary, text.as_bytes())?;
    let linked = std::fs::hard_link(temporary, path);
    let _ = std::fs::remove_file(temporary);
    match linked {
        Ok(()) => {
            tracing::info!(path = %path.display(), "created a development master key");
            Ok(Sealer::new(*key))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => sealer_from_file(&std::fs::read(path)?),
        Err(e) => Err(e),
    }
}

fn write_private(path: &Path, contents: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Set at creation, so the key is never readable by others, not even for an instant.
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(contents)?;
    file.sync_all()
}

fn warn_if_readable_by_others(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path)
            && meta.permissions().mode() & 0o077 != 0
        {
            tracing::warn!(path = %path.display(), "the master key file is accessible to other users; chmod 600 it");
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

fn encode_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        decode_hex(text).expect("hex")
    }

    fn key(text: &str) -> [u8; 32] {
        hex(text).try_into().expect("32 bytes")
    }

    /// The AES-256 test cases 13–16 of McGrew & Viega, "The Galois/Counter Mode of Operation"
    /// (the GCM submission to NIST), as sealed values: version, nonce, ciphertext, tag.
    #[test]
    fn sealed_values_are_standard_aes_256_gcm() {
        let zero = "0000000000000000000000000000000000000000000000000000000000000000";
        let k = "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308";
        let p = "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72\
                 1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255";
        let c = "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa\
                 8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad";
        let a = "feedfacedeadbeeffeedfacedeadbeefabaddad2";
        let cases: [(&str, &str, &str, &str, &str, &str); 4] = [
            (zero, "000000000000000000000000", "", "", "", "530f8afbc74536b9a963b4f1c4cb738b"),
            (
                zero,
                "000000000000000000000000",
                "00000000000000000000000000000000",
                "",
                "cea7403d4d606b6e074ec5d3baf39d18",
                "d0d1c8a799996bf0265b98b5d48ab919",
            ),
            (k, "cafebabefacedbaddecaf888", p, "", c, "b094dac5d93471bdec1a502270e3cc6c"),
            (k, "cafebabefacedbaddecaf888", &p[..120], a, &c[..120], "76fc6ece0f4e1768cddf8853bb2d551b"),
        ];
        for (i, (k, iv, p, a, c, t)) in cases.into_iter().enumerate() {
            let sealer = Sealer::new(key(k));
            let nonce: [u8; 12] = hex(iv).try_into().expect("nonce");
            let sealed = sealer.seal_with_nonce(nonce, &hex(p), &hex(a));
            let expected = [vec![VERSION_AES256_GCM], hex(iv), hex(c), hex(t)].concat();
            assert_eq!(URL_SAFE_NO_PAD.decode(&sealed).expect("base64url"), expected, "case {}", 13 + i);
            assert_eq!(sealer.open(&sealed, &hex(a)).expect("opens").as_slice(), hex(p).as_slice(), "case {}", 13 + i);
        }
    }

    #[test]
    fn a_value_opens_only_with_its_key_and_aad() {
        let sealer = Sealer::new([7; 32]);
        let sealed = sealer.seal(b"secret", b"kid-1");
        assert_eq!(sealer.open(&sealed, b"kid-1").expect("opens").as_slice(), b"secret");
        assert_eq!(sealer.open(&sealed, b"kid-2"), Err(SealError::Unauthentic));
        assert_eq!(Sealer::new([8; 32]).open(&sealed, b"kid-1"), Err(SealError::Unauthentic));
        // Fresh nonces: sealing twice never gives the same text.
        assert_ne!(sealer.seal(b"secret", b"kid-1"), sealed);
    }

    #[test]
    fn a_changed_or_truncated_value_does_not_open() {
        let sealer = Sealer::new([7; 32]);
        let bytes = URL_SAFE_NO_PAD.decode(sealer.seal(b"secret", b"")).expect("base64url");
        for i in 1..bytes.len() {
            let mut changed = bytes.clone();
            changed[i] ^= 0x01;
            assert_eq!(sealer.open(&URL_SAFE_NO_PAD.encode(&changed), b""), Err(SealError::Unauthentic), "byte {i}");
        }
        let mut other_version = bytes.clone();
        other_version[0] = 2;
        assert_eq!(sealer.open(&URL_SAFE_NO_PAD.encode(&other_version), b""), Err(SealError::UnknownVersion(2)));
        assert_eq!(sealer.open(&URL_SAFE_NO_PAD.encode(&bytes[..28]), b""), Err(SealError::Malformed));
        assert_eq!(sealer.open("", b""), Err(SealError::Malformed));
        assert_eq!(sealer.open("not base64!", b""), Err(SealError::Malformed));
    }

    #[test]
    fn master_keys_are_read_from_hex_or_base64() {
        let raw: [u8; 32] = core::array::from_fn(|i| i as u8 * 7);
        let sealed = Sealer::new(raw).seal(b"x", b"");
        for text in [
            encode_hex(&raw),
            encode_hex(&raw).to_uppercase(),
            format!("  {}\n", encode_hex(&raw)),
            URL_SAFE_NO_PAD.encode(raw),
            URL_SAFE.encode(raw),
            STANDARD.encode(raw),
            STANDARD_NO_PAD.encode(raw),
        ] {
            let sealer = Sealer::from_text(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(sealer.open(&sealed, b"").expect("same key").as_slice(), b"x", "{text:?}");
        }
        for bad in
            ["", "   ", "abcd", &encode_hex(&[1; 31]), &URL_SAFE_NO_PAD.encode([1; 33]), "zz".repeat(32).as_str()]
        {
            assert!(Sealer::from_text(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn debug_never_shows_the_key() {
        let text = format!("{:?}", Sealer::new([0xab; 32]));
        assert!(!text.to_lowercase().contains("abab") && !text.contains("171"), "{text}");
    }

    fn scratch_dir(name: &str) -> std::path::PathBuf {
        let mut suffix = [0u8; 8];
        OsRng.fill_bytes(&mut suffix);
        let dir = std::env::temp_dir().join(format!("tokenops-secrets-{name}-{}", encode_hex(&suffix)));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    #[test]
    fn the_dev_key_is_created_once_private_and_reused() {
        let dir = scratch_dir("dev-key");
        let path = dir.join("keys").join("master.key");
        let first = Sealer::load_or_create_dev_key(&path).expect("created");
        let text = std::fs::read_to_string(&path).expect("key file");
        assert_eq!(text.trim().len(), 64, "64 hex digits");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let sealed = first.seal(b"kept", b"aad");
        let second = Sealer::load_or_create_dev_key(&path).expect("loaded");
        assert_eq!(second.open(&sealed, b"aad").expect("same key").as_slice(), b"kept");
        // No temporary files left behind.
        let names: Vec<_> = std::fs::read_dir(dir.join("keys")).expect("dir").filter_map(|e| e.ok()).collect();
        assert_eq!(names.len(), 1);
        std::fs::write(&path, "garbage").expect("overwrite");
        assert_eq!(Sealer::load_or_create_dev_key(&path).expect_err("refused").kind(), io::ErrorKind::InvalidData);
        let _ = std::fs::remove_dir_all(dir);
    }
}
