//! What an IP address is, for the rule that a name must not lead into this machine, its
//! network or the cloud's metadata service (`allow_private = false`).
//!
//! IPv6 addresses that carry an IPv4 address (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`,
//! NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:AABB:CCDD::`) are judged by the IPv4 address inside:
//! `::ffff:127.0.0.1` is loopback. IPv4 literals are read as the C library's `inet_aton`
//! reads them (what curl, Python and most resolvers accept): one to four parts, each decimal,
//! octal with a leading `0` or hex with `0x`, so `2130706433`, `0x7f.1` and `0177.0.0.1` are
//! all `127.0.0.1`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The class of an address. Everything but [`AddressClass::Public`] is refused by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    Public,
    Loopback,
    /// RFC 1918, IPv6 unique-local and site-local.
    Private,
    LinkLocal,
    /// Carrier-grade NAT, 100.64.0.0/10.
    Cgnat,
    /// A cloud's instance metadata service (instance credentials).
    Metadata,
    Unspecified,
    Multicast,
    Broadcast,
    /// Reserved, documentation and benchmarking ranges: no host of the Internet is there.
    Reserved,
}

impl AddressClass {
    pub fn is_public(self) -> bool {
        self == Self::Public
    }

    /// The words a refusal uses.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Public => "a public address",
            Self::Loopback => "a loopback address",
            Self::Private => "a private address",
            Self::LinkLocal => "a link-local address",
            Self::Cgnat => "a carrier-grade NAT address",
            Self::Metadata => "a cloud metadata address",
            Self::Unspecified => "the unspecified address",
            Self::Multicast => "a multicast address",
            Self::Broadcast => "the broadcast address",
            Self::Reserved => "a reserved address",
        }
    }
}

/// Metadata services: AWS/GCP/Azure/OpenStack, AWS ECS task credentials, Alibaba.
const METADATA_V4: [Ipv4Addr; 3] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(169, 254, 170, 2),
    Ipv4Addr::new(100, 100, 100, 200),
];
/// AWS's IPv6 instance metadata endpoint.
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

pub fn classify(addr: IpAddr) -> AddressClass {
    match addr {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(a: Ipv4Addr) -> AddressClass {
    let [o0, o1, o2, _] = a.octets();
    if METADATA_V4.contains(&a) {
        AddressClass::Metadata
    } else if o0 == 127 {
        AddressClass::Loopback
    } else if o0 == 0 {
        AddressClass::Unspecified
    } else if o0 == 10 || (o0 == 172 && (16..=31).contains(&o1)) || (o0 == 192 && o1 == 168) {
        AddressClass::Private
    } else if o0 == 169 && o1 == 254 {
        AddressClass::LinkLocal
    } else if o0 == 100 && (64..=127).contains(&o1) {
        AddressClass::Cgnat
    } else if a.is_broadcast() {
        AddressClass::Broadcast
    } else if (224..=239).contains(&o0) {
        AddressClass::Multicast
    } else if o0 >= 240
        // 192.0.0.0/24 (protocol assignments), TEST-NETs, 198.18.0.0/15 (benchmarking).
        || (o0 == 192 && o1 == 0 && (o2 == 0 || o2 == 2))
        || (o0 == 198 && (o1 == 18 || o1 == 19))
        || (o0 == 198 && o1 == 51 && o2 == 100)
        || (o0 == 203 && o1 == 0 && o2 == 113)
    {
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

/// The IPv4 address an IPv6 address carries, where it carries one.
fn embedded_v4(a: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = a.segments();
    let tail = Ipv4Addr::new(
        (s[6] >> 8) as u8,
        (s[6] & 0xff) as u8,
        (s[7] >> 8) as u8,
        (s[7] & 0xff) as u8,
    );
    match s {
        // Mapped ::ffff:a.b.c.d and compatible ::a.b.c.d (not :: and ::1 themselves).
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(tail),
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(tail),
        // NAT64, 64:ff9b::/96.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail),
        // 6to4, 2002:AABB:CCDD::/48.
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            (hi & 0xff) as u8,
            (lo >> 8) as u8,
            (lo & 0xff) as u8,
        )),
        _ => None,
    }
}

fn classify_v6(a: Ipv6Addr) -> AddressClass {
    if let Some(v4) = embedded_v4(a) {
        return classify_v4(v4);
    }
    let s = a.segments();
    if a == METADATA_V6 {
        AddressClass::Metadata
    } else if a.is_loopback() {
        AddressClass::Loopback
    } else if a.is_unspecified() {
        AddressClass::Unspecified
    } else if (s[0] & 0xfe00) == 0xfc00 || (s[0] & 0xffc0) == 0xfec0 {
        AddressClass::Private
    } else if (s[0] & 0xffc0) == 0xfe80 {
        AddressClass::LinkLocal
    } else if (s[0] & 0xff00) == 0xff00 {
        AddressClass::Multicast
    } else if (s[0] == 0x2001 && s[1] == 0x0db8) || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]) {
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

/// One part of an `inet_aton` address: decimal, `0`-led octal or `0x` hex.
fn aton_part(text: &str) -> Option<u64> {
    if text.is_empty() {
        return None;
    }
    let (digits, radix) =
        if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            (hex, 16)
        } else if text.len() > 1 && text.starts_with('0') {
            (&text[1..], 8)
        } else {
            (text, 10)
        };
    if digits.is_empty() {
        // `0x` alone is 0 for inet_aton.
        return (radix == 16).then_some(0);
    }
    // from_str_radix would take a sign; inet_aton takes digits only.
    if digits.len() > 12 || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// The IPv4 address `text` spells in any of `inet_aton`'s forms.
fn parse_v4_aton(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<u64> = text.split('.').map(aton_part).collect::<Option<Vec<_>>>()?;
    let value = match parts.as_slice() {
        [a] => (*a <= 0xffff_ffff).then_some(*a)?,
        [a, b] => (*a <= 0xff && *b <= 0xff_ffff).then_some((a << 24) | b)?,
        [a, b, c] => {
            (*a <= 0xff && *b <= 0xff && *c <= 0xffff).then_some((a << 24) | (b << 16) | c)?
        }
        [a, b, c, d] => (*a <= 0xff && *b <= 0xff && *c <= 0xff && *d <= 0xff)
            .then_some((a << 24) | (b << 16) | (c << 8) | d)?,
        _ => return None,
    };
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

/// The address a host written as an IP literal names (`[::1]`, `fe80::1%eth0`, `10.1.2.3`,
/// `0x7f.1`), or `None` for a name.
pub fn parse_ip_literal(host: &str) -> Option<IpAddr> {
    let host = host.trim_end_matches('.');
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if bare.contains(':') {
        let without_zone = bare.split('%').next().unwrap_or(bare);
        return without_zone.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    // A name has a label that is not a number (`1password.com`, `a1.b`).
    parse_v4_aton(bare).map(IpAddr::V4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn class(text: &str) -> AddressClass {
        classify(parse_ip_literal(text).unwrap_or_else(|| panic!("{text} is not a literal")))
    }

    #[test]
    fn every_class_has_its_examples() {
        for (text, want) in [
            ("8.8.8.8", AddressClass::Public),
            ("1.1.1.1", AddressClass::Public),
            ("127.0.0.1", AddressClass::Loopback),
            ("127.8.9.10", AddressClass::Loopback),
            ("10.1.2.3", AddressClass::Private),
            ("172.16.0.1", AddressClass::Private),
            ("172.31.255.255", AddressClass::Private),
            ("172.32.0.1", AddressClass::Public),
            ("192.168.1.1", AddressClass::Private),
            ("169.254.1.1", AddressClass::LinkLocal),
            ("169.254.169.254", AddressClass::Metadata),
            ("169.254.170.2", AddressClass::Metadata),
            ("100.100.100.200", AddressClass::Metadata),
            ("100.64.0.1", AddressClass::Cgnat),
            ("100.128.0.1", AddressClass::Public),
            ("0.0.0.0", AddressClass::Unspecified),
            ("255.255.255.255", AddressClass::Broadcast),
            ("224.0.0.1", AddressClass::Multicast),
            ("240.0.0.1", AddressClass::Reserved),
            ("192.0.2.1", AddressClass::Reserved),
            ("::1", AddressClass::Loopback),
            ("[::1]", AddressClass::Loopback),
            ("::", AddressClass::Unspecified),
            ("fd12::1", AddressClass::Private),
            ("fe80::1%eth0", AddressClass::LinkLocal),
            ("ff02::1", AddressClass::Multicast),
            ("fd00:ec2::254", AddressClass::Metadata),
            ("2001:db8::1", AddressClass::Reserved),
            ("2606:4700::1111", AddressClass::Public),
            // IPv4 inside IPv6 is judged as the IPv4 address.
            ("::ffff:127.0.0.1", AddressClass::Loopback),
            ("::ffff:169.254.169.254", AddressClass::Metadata),
            ("::10.0.0.1", AddressClass::Private),
            ("64:ff9b::10.0.0.1", AddressClass::Private),
            ("2002:7f00:1::", AddressClass::Loopback),
            ("::ffff:8.8.8.8", AddressClass::Public),
        ] {
            assert_eq!(class(text), want, "{text}");
        }
    }

    #[test]
    fn disguised_ipv4_literals_are_read_as_inet_aton_reads_them() {
        for text in [
            "2130706433",
            "0x7f000001",
            "0x7f.1",
            "127.1",
            "0177.0.0.1",
            "0177.0.0.01",
            "127.0.1",
            "0x7F.0.0.1",
            "127.0.0.1.",
        ] {
            assert_eq!(
                parse_ip_literal(text),
                Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                "{text}"
            );
        }
        assert_eq!(class("0251.0376.0251.0376"), AddressClass::Metadata);
        assert_eq!(class("2852039166"), AddressClass::Metadata);
        for name in [
            "pypi.org",
            "1password.com",
            "a1.b2",
            "256.1.1.1",
            "1.2.3.4.5",
            "08.1.1.1",
            "+127.0.0.1",
            "",
        ] {
            assert_eq!(parse_ip_literal(name), None, "{name}");
        }
    }

    proptest! {
        #[test]
        fn a_dotted_quad_reads_back_as_itself(a: u8, b: u8, c: u8, d: u8) {
            let text = format!("{a}.{b}.{c}.{d}");
            prop_assert_eq!(parse_ip_literal(&text), Some(IpAddr::V4(Ipv4Addr::new(a, b, c, d))));
        }

        #[test]
        fn every_spelling_of_an_address_has_its_class(addr: u32) {
            let v4 = Ipv4Addr::from(addr);
            let want = classify(IpAddr::V4(v4));
            let [a, b, c, d] = v4.octets();
            for text in [
                addr.to_string(),
                format!("{addr:#x}"),
                format!("0{a:o}.0{b:o}.0{c:o}.0{d:o}"),
                format!("{a}.{}", (u32::from(b) << 16) | (u32::from(c) << 8) | u32::from(d)),
                format!("::ffff:{v4}"),
                format!("[::ffff:{v4}]"),
            ] {
                let parsed = parse_ip_literal(&text);
                prop_assert!(parsed.is_some(), "{}", text);
                prop_assert_eq!(parsed.map(classify), Some(want), "{}", text);
            }
        }

        #[test]
        fn any_text_is_a_literal_or_not_without_panicking(text in "\\PC{0,40}") {
            let _ = parse_ip_literal(&text);
        }
    }
}
