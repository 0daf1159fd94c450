//! The start of Go's `x509.ParseCertificate`, in its order and words, so a certificate that
//! is not one is refused as Pebble refuses it: the outer `SEQUENCE`, the TBS `SEQUENCE`, the
//! version, the serial number, the signature algorithm inside and after the TBS (the same)
//! and its OID, read with
//! `cryptobyte`'s strict DER rules (definite, minimal lengths of at most four bytes). webpki
//! parses the rest; its own refusals of malformed DER read as Go's most general one.
//!
//! Nothing here recurses: each step reads one element's header and length, so nesting of
//! any depth costs one step.

/// `x509: malformed certificate`, Go's words for DER it cannot read as a certificate.
pub(super) const MALFORMED: &str = "x509: malformed certificate";

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const OID: u8 = 0x06;
/// `[0]`, constructed: the version's explicit tag.
const VERSION: u8 = 0xa0;

/// Reads one element with tag `tag` from the front of `input`: its contents and the rest.
fn element(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = input.split_first()?;
    // A tag in the high-number form never equals the one-byte tags read here.
    if first != tag || first & 0x1f == 0x1f {
        return None;
    }
    let (&len_byte, rest) = rest.split_first()?;
    let (len, rest) = if len_byte & 0x80 == 0 {
        (usize::from(len_byte), rest)
    } else {
        let len_len = usize::from(len_byte & 0x7f);
        if len_len == 0 || len_len > 4 || rest.len() < len_len {
            return None;
        }
        let len = rest[..len_len]
            .iter()
            .fold(0usize, |len, &b| (len << 8) | usize::from(b));
        // Not minimal: a short form would do, or a leading zero byte.
        if len < 128 || rest[0] == 0 {
            return None;
        }
        (len, &rest[len_len..])
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// `cryptobyte`'s INTEGER: not empty, and minimally encoded.
fn integer(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let (value, rest) = element(input, INTEGER)?;
    match value {
        [] => None,
        [0, next, ..] if next & 0x80 == 0 => None,
        [0xff, next, ..] if next & 0x80 != 0 => None,
        _ => Some((value, rest)),
    }
}

/// Reads `der` as far as Go's parser refuses a certificate in words of its own.
pub(super) fn check(der: &[u8]) -> Result<(), &'static str> {
    let (cert, _) = element(der, SEQUENCE).ok_or(MALFORMED)?;
    let (tbs, after_tbs) = element(cert, SEQUENCE).ok_or("x509: malformed tbs certificate")?;
    let tbs = match element(tbs, VERSION) {
        Some((version, rest)) => {
            let (value, after) = integer(version).ok_or("x509: malformed version")?;
            if !after.is_empty() || value.len() > 8 {
                return Err("x509: malformed version");
            }
            let signed = value.iter().fold(i64::from(value[0] as i8) >> 8, |n, &b| {
                (n << 8) | i64::from(b)
            });
            if signed < 0 {
                return Err("x509: malformed version");
            }
            if signed > 2 {
                return Err("x509: invalid version");
            }
            rest
        }
        // An element with another tag is no version: the serial number comes first.
        None if tbs.first() == Some(&VERSION) => return Err("x509: malformed version"),
        None => tbs,
    };
    let (_, tbs) = integer(tbs).ok_or("x509: malformed serial number")?;
    let (inner_ai, _) =
        element(tbs, SEQUENCE).ok_or("x509: malformed signature algorithm identifier")?;
    let (outer_ai, _) =
        element(after_tbs, SEQUENCE).ok_or("x509: malformed algorithm identifier")?;
    if inner_ai != outer_ai {
        return Err("x509: inner and outer signature algorithm identifiers don't match");
    }
    let (oid, _) = element(inner_ai, OID).ok_or(MALFORMED_OID)?;
    if oid.is_empty() {
        return Err(MALFORMED_OID);
    }
    let mut rest = oid;
    while !rest.is_empty() {
        rest = base128(rest).ok_or(MALFORMED_OID)?;
    }
    Ok(())
}

const MALFORMED_OID: &str = "x509: malformed OID";

/// One of an OID's components as `cryptobyte` reads it (minimal, within 31 bits): the rest.
fn base128(mut input: &[u8]) -> Option<&[u8]> {
    let mut value: u32 = 0;
    for i in 0..5 {
        let (&b, rest) = input.split_first()?;
        input = rest;
        if value >= 1 << (31 - 7) || (i == 0 && b == 0x80) {
            return None;
        }
        value = (value << 7) | u32::from(b & 0x7f);
        if b & 0x80 == 0 {
            return Some(input);
        }
    }
    None
}

/// webpki's refusal of a certificate, in Go's words where it means malformed DER.
pub(super) fn webpki_text(err: &webpki::Error) -> String {
    match err {
        webpki::Error::BadDer | webpki::Error::BadDerTime | webpki::Error::TrailingData(_) => {
            MALFORMED.to_owned()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tlv(tag: u8, inner: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        let len = inner.len();
        if len < 128 {
            out.push(len as u8);
        } else {
            let bytes: Vec<u8> = len
                .to_be_bytes()
                .into_iter()
                .skip_while(|&b| b == 0)
                .collect();
            out.push(0x80 | bytes.len() as u8);
            out.extend_from_slice(&bytes);
        }
        out.extend_from_slice(inner);
        out
    }

    fn seq(parts: &[&[u8]]) -> Vec<u8> {
        tlv(SEQUENCE, &parts.concat())
    }

    #[test]
    fn refusals_in_gos_order_and_words() {
        let one = tlv(INTEGER, &[1]);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (vec![0xff; 10], MALFORMED),
            (b"\x30\x80\x30\x03\x02\x01\x01\x00\x00".to_vec(), MALFORMED),
            (b"\x30\x81\x03\x30\x01\x01".to_vec(), MALFORMED),
            (seq(&[]), "x509: malformed tbs certificate"),
            (seq(&[&tlv(4, b"aaaa")]), "x509: malformed tbs certificate"),
            (seq(&[&seq(&[])]), "x509: malformed serial number"),
            (
                seq(&[&seq(&[&tlv(INTEGER, &[0, 1])])]),
                "x509: malformed serial number",
            ),
            (
                seq(&[&seq(&[&tlv(VERSION, &tlv(INTEGER, &[5])), &one])]),
                "x509: invalid version",
            ),
            (
                seq(&[&seq(&[&tlv(VERSION, &tlv(INTEGER, &[0xff])), &one])]),
                "x509: malformed version",
            ),
            (
                seq(&[&seq(&[&tlv(VERSION, &tlv(4, &[1])), &one])]),
                "x509: malformed version",
            ),
            (
                seq(&[&seq(&[&one])]),
                "x509: malformed signature algorithm identifier",
            ),
            (
                seq(&[&seq(&[&one, &one])]),
                "x509: malformed signature algorithm identifier",
            ),
        ];
        for (der, words) in cases {
            assert_eq!(check(&der), Err(words), "{der:02x?}");
        }
        let ai = seq(&[&tlv(OID, &[0x2a, 0x03, 0x04])]);
        let tbs = seq(&[&one, &ai]);
        assert_eq!(
            check(&seq(&[&tbs])),
            Err("x509: malformed algorithm identifier")
        );
        assert_eq!(
            check(&seq(&[&tbs, &seq(&[])])),
            Err("x509: inner and outer signature algorithm identifiers don't match")
        );
        assert_eq!(check(&seq(&[&tbs, &ai])), Ok(()));
        for bad in [
            &[][..],
            &[0x80, 0x01],
            &[0x2a, 0x83],
            &[0xff, 0xff, 0xff, 0xff, 0x7f],
        ] {
            let ai = seq(&[&tlv(OID, bad)]);
            let cert = seq(&[&seq(&[&one, &ai]), &ai]);
            assert_eq!(check(&cert), Err(MALFORMED_OID), "{bad:02x?}");
        }
    }

    #[test]
    fn nesting_of_any_depth_is_one_step() {
        let mut deep = Vec::new();
        for _ in 0..10_000 {
            deep = seq(&[&deep]);
        }
        assert_eq!(check(&deep), Err("x509: malformed serial number"));
    }
}
