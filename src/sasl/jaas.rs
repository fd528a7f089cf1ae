//! Kafka's one-line JAAS configuration (`sasl.jaas.config`): a login module, its control
//! flag and its options, ended by `;`, as
//! `org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" user_alice="alice-secret";`.

use std::collections::BTreeMap;

/// One parsed JAAS entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JaasEntry {
    pub module: String,
    pub options: BTreeMap<String, String>,
}

/// Parses one entry: module class, flag (`required`, `requisite`, `sufficient` or
/// `optional`), `name=value` options (values quoted with `"`, where `\"` and `\\` escape, or
/// bare), and the closing `;`. Kafka's `JaasConfig` allows exactly one entry per line.
pub fn parse(text: &str) -> Result<JaasEntry, String> {
    let mut chars = text.trim().chars().peekable();
    let word = |chars: &mut std::iter::Peekable<std::str::Chars>| {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut out = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || c == ';' || c == '=' {
                break;
            }
            out.push(c);
            chars.next();
        }
        out
    };
    let module = word(&mut chars);
    if module.is_empty() {
        return Err("no login module".into());
    }
    let flag = word(&mut chars);
    if !matches!(flag.as_str(), "required" | "requisite" | "sufficient" | "optional") {
        return Err(format!(
            "{flag:?} after the login module is not a control flag (required, requisite, sufficient, optional)"
        ));
    }
    let mut options = BTreeMap::new();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.peek() {
            None => return Err("the entry does not end with ';'".into()),
            Some(';') => {
                chars.next();
                break;
            }
            Some(_) => {}
        }
        let name = word(&mut chars);
        if name.is_empty() || chars.next() != Some('=') {
            return Err(format!("option {name:?} has no '=value'"));
        }
        let value = if chars.peek() == Some(&'"') {
            chars.next();
            let mut value = String::new();
            loop {
                match chars.next() {
                    None => return Err(format!("the value of {name} has no closing quote")),
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some(c) => value.push(c),
                        None => return Err(format!("the value of {name} has no closing quote")),
                    },
                    Some(c) => value.push(c),
                }
            }
            value
        } else {
            word(&mut chars)
        };
        if options.insert(name.clone(), value).is_some() {
            return Err(format!("option {name} appears twice"));
        }
    }
    if chars.any(|c| !c.is_whitespace()) {
        return Err("only one login module may follow sasl.jaas.config (text after ';')".into());
    }
    Ok(JaasEntry { module, options })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafkas_plain_line_parses() {
        let e = parse(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice \"quoted\"";"#,
        )
        .unwrap();
        assert_eq!(e.module, "org.apache.kafka.common.security.plain.PlainLoginModule");
        assert_eq!(e.options["user_admin"], "admin-secret");
        assert_eq!(e.options["user_alice"], "alice \"quoted\"");
        assert_eq!(e.options.len(), 4);
        let bare = parse("M optional a=b ;").unwrap();
        assert_eq!(bare.options["a"], "b");
    }

    #[test]
    fn broken_lines_are_refused() {
        for bad in [
            "",
            "M",
            "M required",
            "M always a=\"b\";",
            "M required a;",
            "M required a=\"b;",
            "M required a=\"b\" a=\"c\";",
            "M required; N required;",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
