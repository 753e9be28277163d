//! `egress`: where a function's, service's or job's code may open connections.
//!
//! In JSON: `"internet"` (the default: public addresses only), `"none"`, or a list of
//! entries, each `host:port`, `ip:port` (`[v6]:port`), a CIDR (`10.0.0.0/8`, every
//! port) or a CIDR with a port (`10.0.0.0/8:5432`, `[fd00::/8]:443`).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::validation::ValidationError;

/// At most this many entries in a list.
pub const MAX_EGRESS_ENTRIES: usize = 64;
/// At most this many bytes per entry (a 253-byte name, ':' and a port).
pub const MAX_EGRESS_ENTRY_LEN: usize = 259;

const FIELD: &str = "egress";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Raw", into = "Raw")]
pub enum Egress {
    /// Public addresses only.
    #[default]
    Internet,
    /// No outgoing connection at all.
    None,
    /// Only what is listed (never loopback or the host's own addresses).
    Allow(Vec<EgressRule>),
}

/// One allowed destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EgressRule {
    /// A name, checked on the name the program asks for; its addresses are still
    /// checked against loopback and the host's own.
    Host { host: String, port: u16 },
    /// Addresses; `None` = every port.
    Net { net: IpNet, port: Option<u16> },
}

impl Egress {
    pub fn is_internet(&self) -> bool {
        *self == Egress::Internet
    }
}

impl fmt::Display for Egress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Egress::Internet => f.write_str("internet"),
            Egress::None => f.write_str("none"),
            Egress::Allow(rules) if rules.is_empty() => f.write_str("[]"),
            Egress::Allow(rules) => {
                let list: Vec<String> = rules.iter().map(ToString::to_string).collect();
                f.write_str(&list.join(","))
            }
        }
    }
}

impl FromStr for Egress {
    type Err = ValidationError;

    /// `internet`, `none`, or entries separated by commas (the CLI's and Terraform's
    /// form of the list; `[]` is the empty list).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "internet" => Ok(Egress::Internet),
            "none" => Ok(Egress::None),
            "[]" => Ok(Egress::Allow(Vec::new())),
            list => Egress::from_raw(Raw::List(
                list.split(',').map(|e| e.trim().to_string()).collect(),
            )),
        }
    }
}

impl fmt::Display for EgressRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EgressRule::Host { host, port } => write!(f, "{host}:{port}"),
            EgressRule::Net { net, port } => {
                let single = net.prefix_len() == net.max_prefix_len();
                let shown = if single {
                    net.addr().to_string()
                } else {
                    net.to_string()
                };
                match (port, net) {
                    (None, _) => f.write_str(&shown),
                    (Some(port), IpNet::V6(_)) => write!(f, "[{shown}]:{port}"),
                    (Some(port), IpNet::V4(_)) => write!(f, "{shown}:{port}"),
                }
            }
        }
    }
}

impl FromStr for EgressRule {
    type Err = ValidationError;

    fn from_str(entry: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| {
            ValidationError::new(
                FIELD,
                format!(
                    "{entry:?} {why}; use host:port, ip:port, [ipv6]:port, a CIDR such as \
                     10.0.0.0/8, or a CIDR with a port such as 10.0.0.0/8:5432"
                ),
            )
        };
        if entry.is_empty() || entry.len() > MAX_EGRESS_ENTRY_LEN {
            return Err(bad(&format!(
                "must have 1-{MAX_EGRESS_ENTRY_LEN} characters"
            )));
        }
        // `[v6]` or `[v6/len]`, with an optional `:port`.
        if let Some(rest) = entry.strip_prefix('[') {
            let (addr, after) = rest.split_once(']').ok_or_else(|| bad("has no ']'"))?;
            let port = match after {
                "" => None,
                p => Some(
                    parse_port(
                        p.strip_prefix(':')
                            .ok_or_else(|| bad("needs ':' after ']'"))?,
                    )
                    .ok_or_else(|| bad("has a bad port (1-65535)"))?,
                ),
            };
            let net = parse_net(addr).ok_or_else(|| bad("is not an IPv6 address or CIDR"))?;
            return Ok(EgressRule::Net { net, port });
        }
        // A bare address or CIDR, v4 or v6: every port.
        if let Some(net) = parse_net(entry) {
            return Ok(EgressRule::Net { net, port: None });
        }
        if entry.contains('/') && !entry.contains(':') {
            return Err(bad("is not a valid CIDR (address/prefix length)"));
        }
        let (head, port) = entry
            .rsplit_once(':')
            .ok_or_else(|| bad("has no port (a name needs one, e.g. example.com:443)"))?;
        let port = parse_port(port).ok_or_else(|| bad("has a bad port (1-65535)"))?;
        if let Some(net) = parse_net(head) {
            if net.addr().is_ipv6() {
                return Err(bad("puts a port after an IPv6 address without brackets"));
            }
            return Ok(EgressRule::Net {
                net,
                port: Some(port),
            });
        }
        if !is_host_name(head) {
            return Err(bad("is not a host name, address or CIDR"));
        }
        Ok(EgressRule::Host {
            host: head.trim_end_matches('.').to_ascii_lowercase(),
            port,
        })
    }
}

fn parse_port(text: &str) -> Option<u16> {
    text.parse::<u16>().ok().filter(|p| *p != 0)
}

/// An address (a network of one) or a CIDR, with the host bits cleared.
fn parse_net(text: &str) -> Option<IpNet> {
    if let Ok(addr) = text.parse::<IpAddr>() {
        return Some(IpNet::from(addr));
    }
    text.parse::<IpNet>().ok().map(|net| net.trunc())
}

/// A DNS name: labels of letters, digits, '-' and '_', 1-63 bytes each, 253 in all.
fn is_host_name(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        // All digits and dots would be a malformed IPv4 address, not a name.
        && !name.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// The JSON form: a word or a list of entries.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Raw {
    Word(String),
    List(Vec<String>),
}

/// For serde, which names the field itself.
impl TryFrom<Raw> for Egress {
    type Error = String;

    fn try_from(raw: Raw) -> Result<Self, Self::Error> {
        Egress::from_raw(raw).map_err(|e| e.rule)
    }
}

impl Egress {
    fn from_raw(raw: Raw) -> Result<Self, ValidationError> {
        match raw {
            Raw::Word(word) => match word.as_str() {
                "internet" => Ok(Egress::Internet),
                "none" => Ok(Egress::None),
                _ => Err(ValidationError::new(
                    FIELD,
                    format!(
                        "{word:?} is not allowed: use \"internet\", \"none\" or a list of \
                         entries such as [\"api.example.com:443\", \"10.0.0.0/8\"]"
                    ),
                )),
            },
            Raw::List(entries) => {
                if entries.len() > MAX_EGRESS_ENTRIES {
                    return Err(ValidationError::new(
                        FIELD,
                        format!(
                            "{} entries: at most {MAX_EGRESS_ENTRIES}; use a CIDR to cover \
                             several addresses",
                            entries.len()
                        ),
                    ));
                }
                entries
                    .iter()
                    .map(|e| e.parse())
                    .collect::<Result<_, _>>()
                    .map(Egress::Allow)
            }
        }
    }
}

impl From<Egress> for Raw {
    fn from(egress: Egress) -> Self {
        match egress {
            Egress::Internet => Raw::Word("internet".into()),
            Egress::None => Raw::Word("none".into()),
            Egress::Allow(rules) => Raw::List(rules.iter().map(ToString::to_string).collect()),
        }
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for Egress {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Egress".into()
    }

    // A string or a list: Kubernetes' structural schemas cannot say that with a
    // type, so the node keeps any value and the operator parses it with this type.
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "\"internet\" (public addresses only), \"none\", or a list of host:port, ip:port or CIDR[:port] entries",
            "x-kubernetes-preserve-unknown-fields": true,
        })
    }

    fn inline_schema() -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Egress, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn words_and_lists_round_trip() {
        assert_eq!(parse("\"internet\"").unwrap(), Egress::Internet);
        assert_eq!(parse("\"none\"").unwrap(), Egress::None);
        let list = r#"["api.example.com:443","10.0.0.5:5432","10.0.0.0/8","10.1.0.0/16:80","[fd00::1]:443","[fd00::/8]:53","fd00::/8","1.2.3.4"]"#;
        let egress = parse(list).unwrap();
        assert_eq!(serde_json::to_string(&egress).unwrap(), list);
        assert_eq!(
            egress.to_string().parse::<Egress>().unwrap(),
            egress,
            "the comma form of the CLI reads back"
        );
        assert_eq!(parse("[]").unwrap(), Egress::Allow(vec![]));
        assert_eq!("[]".parse::<Egress>().unwrap().to_string(), "[]");
    }

    #[test]
    fn names_are_lowercased_and_host_bits_cleared() {
        let Egress::Allow(rules) = parse(r#"["API.Example.com.:443","10.1.2.3/8"]"#).unwrap()
        else {
            panic!("a list")
        };
        assert_eq!(rules[0].to_string(), "api.example.com:443");
        assert_eq!(rules[1].to_string(), "10.0.0.0/8");
    }

    #[test]
    fn bad_entries_are_refused_with_the_entry_and_the_forms() {
        for bad in [
            "\"everything\"",
            r#"["example.com"]"#,
            r#"["example.com:0"]"#,
            r#"["example.com:65536"]"#,
            r#"["10.0.0.0/33"]"#,
            r#"["fd00::1/129"]"#,
            r#"["[fd00::1]443"]"#,
            r#"["bad host:80"]"#,
            r#"["-x.com:80"]"#,
            r#"["1.2.3:80"]"#,
            r#"[""]"#,
            "42",
        ] {
            let err = parse(bad).expect_err(bad);
            assert!(err.contains("use ") || bad == "42", "{bad}: {err}");
        }
        let cli = "10.0.0.0/33,api.example.com:443"
            .parse::<Egress>()
            .unwrap_err();
        assert_eq!(cli.field, "egress", "the CLI and Terraform name the field");
        assert!(cli.rule.contains("not a valid CIDR"), "{cli}");
        let long = format!("[\"{}.com:443\"]", "a".repeat(300));
        assert!(parse(&long).unwrap_err().contains("1-259 characters"));
        let many: Vec<String> = (0..65).map(|i| format!("10.0.0.{i}:80")).collect();
        let err = parse(&serde_json::to_string(&many).unwrap()).unwrap_err();
        assert!(err.contains("at most 64"), "{err}");
    }
}
