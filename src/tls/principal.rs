//! The principal of a client on an SSL listener, as Kafka's `DefaultKafkaPrincipalBuilder`
//! makes it: `User:` and the client certificate's subject in RFC 2253 form
//! (`CN=alice,OU=eng,O=Acme,C=US`, as Java's `X500Principal.getName()`), mapped by
//! `ssl.principal.mapping.rules` (Kafka's `SslPrincipalMapper`): a comma-separated list of
//! `DEFAULT` (the name as it is) and `RULE:<pattern>/<replacement>/[L|U]`, where the pattern
//! must match the whole name and the replacement may use its groups (`$1`); the first rule that
//! applies decides. A name no rule applies to fails the connection, as in Kafka. Without a
//! client certificate the principal is `User:ANONYMOUS`.

use std::fmt::Write as _;

use regex_automata::meta::Regex;

use super::element;

/// Kafka's default `ssl.principal.mapping.rules`.
pub const DEFAULT_RULES: &str = "DEFAULT";

#[derive(Debug)]
enum Rule {
    Default,
    Pattern {
        regex: Regex,
        replacement: String,
        case: Option<char>,
    },
}

/// `ssl.principal.mapping.rules`, parsed.
#[derive(Debug)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

impl PrincipalMapper {
    pub fn parse(text: &str) -> Result<PrincipalMapper, String> {
        let mut rules = Vec::new();
        let mut rest = text.trim_start();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("DEFAULT") {
                rules.push(Rule::Default);
                rest = after;
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                let (pattern, after) = until_slash(after).ok_or("a RULE needs /<replacement>/ after its pattern")?;
                let (replacement, after) = until_slash(after).ok_or("a RULE's replacement must end with '/'")?;
                let (case, after) = match after.chars().next() {
                    Some(c @ ('L' | 'U')) => (Some(c), &after[1..]),
                    _ => (None, after),
                };
                let regex =
                    Regex::new(&format!("^(?:{pattern})$")).map_err(|e| format!("invalid pattern {pattern:?}: {e}"))?;
                rules.push(Rule::Pattern {
                    regex,
                    replacement,
                    case,
                });
                rest = after;
            } else {
                return Err(format!(
                    "{rest:?} is neither DEFAULT nor RULE:<pattern>/<replacement>/[LU]"
                ));
            }
            rest = rest.trim_start();
            match rest.strip_prefix(',') {
                Some(after) => rest = after.trim_start(),
                None if rest.is_empty() => {}
                None => return Err(format!("expected ',' before {rest:?}")),
            }
        }
        if rules.is_empty() {
            return Err("no rule".into());
        }
        Ok(PrincipalMapper { rules })
    }

    /// The principal's name for subject `dn`, or None when no rule applies.
    pub fn name(&self, dn: &str) -> Option<String> {
        for rule in &self.rules {
            match rule {
                Rule::Default => return Some(dn.to_string()),
                Rule::Pattern {
                    regex,
                    replacement,
                    case,
                } => {
                    let mut caps = regex.create_captures();
                    regex.captures(dn, &mut caps);
                    if !caps.is_match() {
                        continue;
                    }
                    let mut out = String::new();
                    let mut chars = replacement.chars().peekable();
                    while let Some(c) = chars.next() {
                        if c == '$' && chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                            let mut group = 0usize;
                            while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                                group = group.saturating_mul(10).saturating_add(d as usize);
                                chars.next();
                            }
                            if let Some(span) = caps.get_group(group) {
                                out.push_str(&dn[span.range()]);
                            }
                        } else if c == '\\' {
                            if let Some(next) = chars.next() {
                                out.push(next);
                            }
                        } else {
                            out.push(c);
                        }
                    }
                    return Some(match case {
                        Some('L') => out.to_lowercase(),
                        Some('U') => out.to_uppercase(),
                        _ => out,
                    });
                }
            }
        }
        None
    }
}

/// The text up to the first '/' not escaped by '\' (escapes of '/' undone), and what follows it.
fn until_slash(text: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, '/')) => out.push('/'),
                Some((_, other)) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            },
            '/' => return Some((out, &text[i + 1..])),
            _ => out.push(c),
        }
    }
    None
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;

/// The subject of a DER certificate in RFC 2253 form, or None when it cannot be read.
pub fn subject_dn(certificate: &[u8]) -> Option<String> {
    let mut rest = super::tbs_fields(certificate)?;
    // serialNumber, signature, issuer, validity, then the subject.
    for _ in 0..4 {
        rest = element(rest)?.2;
    }
    let (SEQUENCE, name, _) = element(rest)? else {
        return None;
    };
    let mut rdns = Vec::new();
    let mut rest = name;
    while !rest.is_empty() {
        let (tag, set, after) = element(rest)?;
        if tag != SET {
            return None;
        }
        rest = after;
        let mut attributes = Vec::new();
        let mut inner = set;
        while !inner.is_empty() {
            let (SEQUENCE, atv, after) = element(inner)? else {
                return None;
            };
            inner = after;
            let (OID, oid, value) = element(atv)? else {
                return None;
            };
            attributes.push(attribute(oid, value)?);
        }
        rdns.push(attributes.join("+"));
    }
    // RFC 2253: the last RDN of the sequence first.
    rdns.reverse();
    Some(rdns.join(","))
}

/// `TYPE=value` of one attribute, Java's RFC 2253 keywords, else the dotted OID and `#hex`.
fn attribute(oid: &[u8], value: &[u8]) -> Option<String> {
    let keyword = match oid {
        [0x55, 0x04, 0x03] => Some("CN"),
        [0x55, 0x04, 0x06] => Some("C"),
        [0x55, 0x04, 0x07] => Some("L"),
        [0x55, 0x04, 0x08] => Some("ST"),
        [0x55, 0x04, 0x09] => Some("STREET"),
        [0x55, 0x04, 0x0a] => Some("O"),
        [0x55, 0x04, 0x0b] => Some("OU"),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => Some("DC"),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => Some("UID"),
        _ => None,
    };
    let text = keyword.and_then(|_| string_value(value));
    Some(match (keyword, text) {
        (Some(k), Some(text)) => format!("{k}={}", escape(&text)),
        _ => {
            let mut out = format!("{}=#", dotted(oid)?);
            for b in value {
                let _ = write!(out, "{b:02x}");
            }
            out
        }
    })
}

/// A directory string's text (UTF8, Printable, IA5, T61 as Latin-1, BMP).
fn string_value(value: &[u8]) -> Option<String> {
    let (tag, content, _) = element(value)?;
    match tag {
        0x0c | 0x13 | 0x16 => std::str::from_utf8(content).ok().map(str::to_string),
        0x14 => Some(content.iter().map(|b| char::from(*b)).collect()),
        0x1e => {
            let units: Vec<u16> = content
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

/// RFC 2253 escaping: `,+"\<>;` anywhere, '#' or ' ' leading, ' ' trailing.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let last = text.chars().count().saturating_sub(1);
    for (i, c) in text.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// An OID's dotted form.
fn dotted(oid: &[u8]) -> Option<String> {
    let (&first, rest) = oid.split_first()?;
    let mut out = format!("{}.{}", first / 40, first % 40);
    let mut n: u64 = 0;
    for b in rest {
        n = n.checked_mul(128)? | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            let _ = write!(out, ".{n}");
            n = 0;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_map_as_kafka_documents() {
        let m = PrincipalMapper::parse(
            r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,DEFAULT",
        )
        .unwrap();
        assert_eq!(
            m.name("CN=kafka-server1,OU=ServiceUsers,O=Org,C=US").as_deref(),
            Some("kafka-server1")
        );
        assert_eq!(
            m.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US")
                .as_deref(),
            Some("duke@javasoft")
        );
        assert_eq!(m.name("OU=x,cn=admin1,O=y").as_deref(), Some("ADMIN1"));
        assert_eq!(m.name("O=none").as_deref(), Some("O=none"));
        let strict = PrincipalMapper::parse(r"RULE:^CN=([^,]*)$/$1/").unwrap();
        assert_eq!(strict.name("CN=a,O=b"), None, "no rule applies");
        assert!(PrincipalMapper::parse("RULE:^CN=(.*)").is_err());
        assert!(PrincipalMapper::parse("NOPE").is_err());
        assert!(PrincipalMapper::parse(" DEFAULT ").is_ok());
    }

    #[test]
    fn subjects_read_in_rfc_2253_order() {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CountryName, "US");
        dn.push(rcgen::DnType::OrganizationName, "Acme, Inc.");
        dn.push(rcgen::DnType::OrganizationalUnitName, "eng");
        dn.push(rcgen::DnType::CommonName, "alice");
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            subject_dn(cert.der()).as_deref(),
            Some(r"CN=alice,OU=eng,O=Acme\, Inc.,C=US")
        );
        assert_eq!(subject_dn(&cert.der()[..40]), None, "truncated");
        assert_eq!(subject_dn(&[]), None);
    }
}
