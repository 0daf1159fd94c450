//! Websocket framing (RFC 6455, section 5): frame headers and masking, for both sides of
//! exec's data websockets.
//!
//! The daemon and this client frame exec's streams themselves so that the bytes go where they
//! are going without passing through a websocket library's buffers: a command's output moves
//! from its pipe to the socket inside the kernel, after a header from [`Header::encode`], and
//! is read straight into the caller's buffer; input is masked as it is copied into its frame,
//! and unmasked in the buffer the daemon read it into. Only the framing lives here; reading
//! and writing are each side's.

/// The longest header: two bytes, an eight-byte length and a four-byte mask.
pub const MAX_HEADER: usize = 14;

/// The longest payload of a control frame (close, ping, pong).
pub const MAX_CONTROL_PAYLOAD: u64 = 125;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// More of the message a text or binary frame began.
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

impl Opcode {
    fn bits(self) -> u8 {
        match self {
            Opcode::Continuation => 0x0,
            Opcode::Text => 0x1,
            Opcode::Binary => 0x2,
            Opcode::Close => 0x8,
            Opcode::Ping => 0x9,
            Opcode::Pong => 0xA,
        }
    }

    fn from_bits(bits: u8) -> Option<Opcode> {
        Some(match bits {
            0x0 => Opcode::Continuation,
            0x1 => Opcode::Text,
            0x2 => Opcode::Binary,
            0x8 => Opcode::Close,
            0x9 => Opcode::Ping,
            0xA => Opcode::Pong,
            _ => return None,
        })
    }

    /// Close, ping and pong: short, never fragmented, and allowed between the fragments of
    /// a message.
    pub fn is_control(self) -> bool {
        matches!(self, Opcode::Close | Opcode::Ping | Opcode::Pong)
    }
}

/// Why bytes are not a frame header the daemon accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("reserved bits set in a frame header")]
    ReservedBits,
    #[error("unknown opcode {0:#x}")]
    UnknownOpcode(u8),
    #[error("control frame longer than 125 bytes or fragmented")]
    BadControlFrame,
    #[error("payload length with its most significant bit set")]
    BadLength,
}

/// A frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The last frame of its message.
    pub fin: bool,
    pub opcode: Opcode,
    /// The key the payload is masked with: a client's frames have one, a server's none.
    pub mask: Option<[u8; 4]>,
    /// The payload's length.
    pub len: u64,
}

impl Header {
    /// The header of a whole, unmasked message: what a server sends.
    pub fn server(opcode: Opcode, len: usize) -> Header {
        Header {
            fin: true,
            opcode,
            mask: None,
            len: len as u64,
        }
    }

    /// Writes the header into `out`; returns how many bytes it took.
    pub fn encode(&self, out: &mut [u8; MAX_HEADER]) -> usize {
        out[0] = (u8::from(self.fin) << 7) | self.opcode.bits();
        let mask_bit = if self.mask.is_some() { 0x80 } else { 0 };
        let mut used = match self.len {
            len @ 0..=125 => {
                out[1] = mask_bit | len as u8;
                2
            }
            len @ 126..=0xFFFF => {
                out[1] = mask_bit | 126;
                out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
                4
            }
            len => {
                out[1] = mask_bit | 127;
                out[2..10].copy_from_slice(&len.to_be_bytes());
                10
            }
        };
        if let Some(key) = self.mask {
            out[used..used + 4].copy_from_slice(&key);
            used += 4;
        }
        used
    }

    /// Parses the header at the start of `buf`: the header and its length, or `None` when
    /// `buf` does not hold all of it yet.
    pub fn parse(buf: &[u8]) -> Result<Option<(Header, usize)>, FrameError> {
        let [first, second, ..] = *buf else {
            return Ok(None);
        };
        if first & 0x70 != 0 {
            return Err(FrameError::ReservedBits);
        }
        let opcode =
            Opcode::from_bits(first & 0x0F).ok_or(FrameError::UnknownOpcode(first & 0x0F))?;
        let fin = first & 0x80 != 0;
        let masked = second & 0x80 != 0;
        let (len, mut used) = match second & 0x7F {
            126 => match buf.get(2..4) {
                Some(bytes) => (u64::from(u16::from_be_bytes([bytes[0], bytes[1]])), 4),
                None => return Ok(None),
            },
            127 => match buf.get(2..10) {
                Some(bytes) => {
                    let len = u64::from_be_bytes(bytes.try_into().expect("eight bytes"));
                    if len >> 63 != 0 {
                        return Err(FrameError::BadLength);
                    }
                    (len, 10)
                }
                None => return Ok(None),
            },
            len => (u64::from(len), 2),
        };
        if opcode.is_control() && (!fin || len > MAX_CONTROL_PAYLOAD) {
            return Err(FrameError::BadControlFrame);
        }
        let mask = if masked {
            let Some(key) = buf.get(used..used + 4) else {
                return Ok(None);
            };
            used += 4;
            Some(key.try_into().expect("four bytes"))
        } else {
            None
        };
        Ok(Some((
            Header {
                fin,
                opcode,
                mask,
                len,
            },
            used,
        )))
    }
}

/// Masks (or unmasks: it is its own inverse) `payload` with `key`, where `payload` starts
/// `offset` bytes into its frame's payload.
pub fn apply_mask(payload: &mut [u8], key: [u8; 4], offset: u64) {
    let mut key = key;
    key.rotate_left((offset % 4) as usize);
    let wide = u64::from_ne_bytes([
        key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3],
    ]);
    let mut chunks = payload.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let word = u64::from_ne_bytes((&*chunk).try_into().expect("eight bytes")) ^ wide;
        chunk.copy_from_slice(&word.to_ne_bytes());
    }
    for (byte, k) in chunks.into_remainder().iter_mut().zip(key.iter().cycle()) {
        *byte ^= k;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(header: Header) {
        let mut out = [0u8; MAX_HEADER];
        let used = header.encode(&mut out);
        assert_eq!(Header::parse(&out[..used]), Ok(Some((header, used))));
        // One byte short is not a header yet.
        assert_eq!(Header::parse(&out[..used - 1]), Ok(None));
    }

    #[test]
    fn headers_of_every_length_form_round_trip() {
        for len in [0, 1, 125, 126, 0xFFFF, 0x1_0000, 1 << 40] {
            for mask in [None, Some([1, 2, 3, 4])] {
                round_trip(Header {
                    fin: true,
                    opcode: Opcode::Binary,
                    mask,
                    len,
                });
            }
        }
        round_trip(Header {
            fin: false,
            opcode: Opcode::Text,
            mask: None,
            len: 3,
        });
    }

    #[test]
    fn lengths_use_the_shortest_form_as_the_rfc_asks() {
        let mut out = [0u8; MAX_HEADER];
        assert_eq!(Header::server(Opcode::Binary, 125).encode(&mut out), 2);
        assert_eq!(Header::server(Opcode::Binary, 126).encode(&mut out), 4);
        assert_eq!(&out[..4], &[0x82, 126, 0, 126]);
        assert_eq!(
            Header::server(Opcode::Binary, 0x1_0000).encode(&mut out),
            10
        );
        assert_eq!(&out[..2], &[0x82, 127]);
    }

    #[test]
    fn bad_headers_are_refused() {
        assert_eq!(Header::parse(&[0xC2, 0]), Err(FrameError::ReservedBits));
        assert_eq!(Header::parse(&[0x83, 0]), Err(FrameError::UnknownOpcode(3)));
        // A fragmented ping, and a close with a long payload.
        assert_eq!(Header::parse(&[0x09, 0]), Err(FrameError::BadControlFrame));
        assert_eq!(
            Header::parse(&[0x88, 126, 0, 200]),
            Err(FrameError::BadControlFrame)
        );
        let mut huge = [0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(Header::parse(&huge), Err(FrameError::BadLength));
        huge[2] = 0x7F;
        assert!(Header::parse(&huge).unwrap().is_some());
    }

    #[test]
    fn masking_in_pieces_matches_masking_at_once() {
        let key = [0x37, 0xFA, 0x21, 0x3D];
        let data: Vec<u8> = (0..=255).cycle().take(1000).collect();
        let mut whole = data.clone();
        apply_mask(&mut whole, key, 0);
        // The RFC's definition, byte by byte.
        let expected: Vec<u8> = data
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ key[i % 4])
            .collect();
        assert_eq!(whole, expected);
        for split in [1, 3, 7, 8, 9, 500, 999] {
            let mut pieces = data.clone();
            let (head, tail) = pieces.split_at_mut(split);
            apply_mask(head, key, 0);
            apply_mask(tail, key, split as u64);
            assert_eq!(pieces, expected, "split at {split}");
        }
        apply_mask(&mut whole, key, 0);
        assert_eq!(whole, data, "masking twice gives the bytes back");
    }
}
