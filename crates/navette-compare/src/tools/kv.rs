//! `key=value` lines, as printed by the C programs of `bench/`:
//! `[word] key=value key=value …`.

use super::ParseError;

/// One line: an optional leading word and its fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvLine<'a> {
    /// The line as written.
    pub text: &'a str,
    /// The first word when it is not a `key=value`.
    pub head: Option<&'a str>,
    /// The `key=value` pairs, in order.
    pub pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> KvLine<'a> {
    /// Reads a line; `None` when it has no `key=value` pair at all.
    pub fn parse(text: &'a str) -> Option<Self> {
        let mut words = text.split_whitespace().peekable();
        let head = words.next_if(|w| !w.contains('='));
        let pairs: Vec<_> = words.filter_map(|w| w.split_once('=')).collect();
        (!pairs.is_empty()).then_some(Self { text, head, pairs })
    }

    /// The raw value of `key`.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.pairs.iter().find(|(k, _)| *k == key).map(|&(_, v)| v)
    }

    /// `key` as a number.
    pub fn number<T: std::str::FromStr>(&self, key: &'static str) -> Result<T, ParseError> {
        self.get(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| ParseError::BadField {
                line: self.text.trim().to_owned(),
                field: key,
            })
    }
}

/// Every `key=value` line of `output`.
pub fn lines(output: &str) -> impl Iterator<Item = KvLine<'_>> {
    output.lines().filter_map(KvLine::parse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_and_fields() {
        let line = KvLine::parse("memcpy size=64 bandwidth_mbps=12.5").unwrap();
        assert_eq!(line.head, Some("memcpy"));
        assert_eq!(line.number::<usize>("size"), Ok(64));
        assert_eq!(line.number::<f64>("bandwidth_mbps"), Ok(12.5));
        assert!(line.number::<f64>("latency_us").is_err());
        let line = KvLine::parse("size=8 latency_us=x").unwrap();
        assert_eq!(line.head, None);
        assert!(line.number::<f64>("latency_us").is_err());
        assert_eq!(KvLine::parse("[vm:123] some warning"), None);
        assert_eq!(KvLine::parse(""), None);
    }
}
