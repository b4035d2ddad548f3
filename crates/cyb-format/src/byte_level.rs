//! GPT-2's byte-level BPE alphabet: printable bytes stand for themselves, the other 68 bytes
//! are spelled with code points from U+0100 up, in byte order.

/// The character that spells each byte.
pub fn byte_level_chars() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 0x100u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        table[usize::from(b)] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or('\0');
            next += 1;
            c
        };
    }
    table
}
