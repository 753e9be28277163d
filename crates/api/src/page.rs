//! Pages of a listing: `?limit=&after=` (the cursor is the last name of the page
//! before) for the REST API's lists and the console's text and JSON listings, and
//! `?page=` numbers for the console's list page. Without them a list answers whole,
//! as it did before pages existed.

use serde::{Deserialize, Serialize};

use crate::validation::ValidationError;

/// Entries per page when `limit` is left out (and on the console's list page).
pub const DEFAULT_PAGE_SIZE: usize = 50;
/// The largest `limit`.
pub const MAX_PAGE_SIZE: usize = 1000;

/// The query of a paginated list, as text: a bad value is refused naming its field
/// rather than with serde's own words.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// Where a page starts and how long it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub limit: usize,
    /// The last name of the page before; None for the first page.
    pub after: Option<String>,
}

impl PageQuery {
    /// None when neither `limit` nor `after` is given (the whole list).
    pub fn cursor(&self) -> Result<Option<Cursor>, ValidationError> {
        if self.limit.is_none() && self.after.is_none() {
            return Ok(None);
        }
        let limit = match self.limit.as_deref() {
            Some(value) => parse_limit(value)?,
            None => DEFAULT_PAGE_SIZE,
        };
        let after = self.after.clone().filter(|a| !a.is_empty());
        Ok(Some(Cursor { limit, after }))
    }
}

/// `limit`: 1 to [`MAX_PAGE_SIZE`].
pub fn parse_limit(value: &str) -> Result<usize, ValidationError> {
    let rule = || {
        ValidationError::new(
            "limit",
            format!("must be a whole number from 1 to {MAX_PAGE_SIZE}, got {value:?}"),
        )
    };
    match value.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_PAGE_SIZE).contains(&n) => Ok(n),
        _ => Err(rule()),
    }
}

/// `page`: 1 or more.
pub fn parse_page_number(value: &str) -> Result<usize, ValidationError> {
    match value.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(ValidationError::new(
            "page",
            format!("must be a whole number from 1, got {value:?}"),
        )),
    }
}

/// One page of a list: its items, and the cursor of the next page when more exist.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// A list answer: the whole list (a JSON array) or, when asked for, a page of it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Listed<T> {
    All(Vec<T>),
    Page(Page<T>),
}

impl<T> Listed<T> {
    /// `items` sorted by name, whole or the page `cursor` names.
    pub fn of(items: Vec<T>, cursor: Option<&Cursor>, name: impl Fn(&T) -> &str) -> Self {
        match cursor {
            None => Listed::All(items),
            Some(cursor) => Listed::Page(page_after(items, cursor, name)),
        }
    }
}

/// The items of `sorted` (by name) after `cursor.after`, at most `cursor.limit`. A
/// cursor naming a deleted item still finds its place; one past the end is an empty
/// last page.
pub fn page_after<T>(sorted: Vec<T>, cursor: &Cursor, name: impl Fn(&T) -> &str) -> Page<T> {
    let start = match &cursor.after {
        Some(after) => sorted.partition_point(|item| name(item) <= after.as_str()),
        None => 0,
    };
    take_page(sorted, start, cursor.limit, name)
}

/// `limit` items of `items` from `start`, the next cursor being the last one's name.
pub fn take_page<T>(
    items: Vec<T>,
    start: usize,
    limit: usize,
    name: impl Fn(&T) -> &str,
) -> Page<T> {
    let more = items.len() > start.saturating_add(limit);
    let items: Vec<T> = items.into_iter().skip(start).take(limit).collect();
    let next = if more {
        items.last().map(|last| name(last).to_string())
    } else {
        None
    };
    Page { items, next }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("f{i:03}")).collect()
    }

    fn cursor(limit: usize, after: Option<&str>) -> Cursor {
        Cursor {
            limit,
            after: after.map(String::from),
        }
    }

    #[test]
    fn pages_walk_the_whole_list_once() {
        for total in [0, 1, 49, 50, 51, 100, 101] {
            let all = names(total);
            let mut seen = Vec::new();
            let mut after = None;
            let mut pages = 0;
            loop {
                let page = page_after(all.clone(), &cursor(50, after.as_deref()), String::as_str);
                pages += 1;
                assert!(page.items.len() <= 50);
                seen.extend(page.items);
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            assert_eq!(seen, all, "{total} items");
            // An exact multiple ends on a full page, with no empty one after it.
            assert_eq!(pages, total.div_ceil(50).max(1), "{total} items");
        }
    }

    #[test]
    fn a_cursor_past_the_end_or_of_a_deleted_item_still_finds_its_place() {
        let all = names(10);
        let past = page_after(all.clone(), &cursor(5, Some("zzz")), String::as_str);
        assert!(past.items.is_empty() && past.next.is_none());
        // "f002x" is gone: the page starts at the next name.
        let gone = page_after(all, &cursor(2, Some("f002x")), String::as_str);
        assert_eq!(gone.items, ["f003", "f004"]);
        assert_eq!(gone.next.as_deref(), Some("f004"));
    }

    #[test]
    fn bad_limits_and_pages_name_their_field() {
        for bad in ["0", "1001", "ten", "-1", ""] {
            let query = PageQuery {
                limit: Some(bad.into()),
                after: None,
            };
            let e = query.cursor().unwrap_err();
            assert_eq!(e.field, "limit", "{bad:?}");
            assert!(e.to_string().starts_with("limit: "), "{e}");
        }
        for bad in ["0", "two", "-3", "1.5"] {
            assert_eq!(parse_page_number(bad).unwrap_err().field, "page", "{bad:?}");
        }
        assert_eq!(parse_page_number(" 3 ").unwrap(), 3);
        assert_eq!(PageQuery::default().cursor().unwrap(), None);
        let only_after = PageQuery {
            limit: None,
            after: Some("b".into()),
        };
        assert_eq!(
            only_after.cursor().unwrap(),
            Some(cursor(DEFAULT_PAGE_SIZE, Some("b")))
        );
    }

    #[test]
    fn a_page_is_an_object_and_the_whole_list_an_array() {
        let whole = Listed::of(names(2), None, String::as_str);
        assert_eq!(serde_json::to_string(&whole).unwrap(), r#"["f000","f001"]"#);
        let page = Listed::of(names(3), Some(&cursor(2, None)), String::as_str);
        assert_eq!(
            serde_json::to_string(&page).unwrap(),
            r#"{"items":["f000","f001"],"next":"f001"}"#
        );
        let last = Listed::of(names(3), Some(&cursor(2, Some("f001"))), String::as_str);
        assert_eq!(
            serde_json::to_string(&last).unwrap(),
            r#"{"items":["f002"]}"#
        );
    }
}
