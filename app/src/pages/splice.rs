//! Highlighted files are not copied into every page that shows them: the page is
//! rendered with a marker where each file's HTML goes, and sent as parts that share the
//! cached HTML (a 5,000-line file is ~6 MB of classed HTML).

use std::sync::{Arc, Mutex};

use bytes::Bytes;

/// A rendered page: the pieces of its body, in order.
#[derive(Debug)]
pub struct PageBody {
    parts: Vec<Bytes>,
}

impl PageBody {
    pub fn into_parts(self) -> Vec<Bytes> {
        self.parts
    }

    /// The page in one string, for the tests' assertions.
    #[cfg(test)]
    pub(crate) fn into_string(self) -> String {
        String::from_utf8_lossy(&self.parts.concat()).into_owned()
    }
}

/// Owns a shared piece of HTML for a `Bytes` that points into it.
struct SharedHtml(Arc<str>);

impl AsRef<[u8]> for SharedHtml {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// Collects the shared pieces of one page while its view is built; components find it
/// in the page's context ([`Splicer::provide`]).
pub(super) struct Splicer {
    /// The response's CSP nonce: unguessable, so no escaped user text can forge a marker.
    nonce: String,
    pieces: Mutex<Vec<Arc<str>>>,
}

impl Splicer {
    pub(super) fn new(nonce: &str) -> Self {
        Splicer {
            nonce: nonce.to_string(),
            pieces: Mutex::new(Vec::new()),
        }
    }

    /// A splicer for the page being built, in its reactive owner's context.
    pub(super) fn provide(nonce: &str) -> Arc<Self> {
        let splicer = Arc::new(Splicer::new(nonce));
        leptos::prelude::provide_context(splicer.clone());
        splicer
    }

    /// The splicer of the page being built.
    pub(super) fn current() -> Arc<Self> {
        leptos::prelude::expect_context::<Arc<Splicer>>()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<str>>> {
        // Only this page's thread touches it; a poisoned lock still holds plain data.
        self.pieces.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn marker_of(&self, index: usize) -> String {
        format!("<!--splice {} {index}-->", self.nonce)
    }

    /// Raw HTML to render where `html` belongs; [`Splicer::finish`] puts `html` there.
    pub(super) fn marker(&self, html: &Arc<str>) -> String {
        let mut pieces = self.lock();
        pieces.push(html.clone());
        self.marker_of(pieces.len() - 1)
    }

    /// The page: `skeleton` with every marker replaced by its piece.
    pub(super) fn finish(&self, skeleton: String) -> PageBody {
        let pieces = std::mem::take(&mut *self.lock());
        let mut found: Vec<(usize, usize, Arc<str>)> = pieces
            .into_iter()
            .enumerate()
            .filter_map(|(index, piece)| {
                let marker = self.marker_of(index);
                skeleton
                    .find(&marker)
                    .map(|at| (at, at + marker.len(), piece))
            })
            .collect();
        found.sort_by_key(|(at, _, _)| *at);
        let skeleton = Bytes::from(skeleton);
        let mut parts = Vec::with_capacity(2 * found.len() + 1);
        let mut rest = 0;
        for (at, end, piece) in found {
            parts.push(skeleton.slice(rest..at));
            parts.push(Bytes::from_owner(SharedHtml(piece)));
            rest = end;
        }
        parts.push(skeleton.slice(rest..));
        parts.retain(|part| !part.is_empty());
        PageBody { parts }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_replaced_in_page_order_and_pieces_are_shared() {
        let splicer = Splicer::new("n0nce");
        let first: Arc<str> = "<span>one</span>".into();
        let second: Arc<str> = "<span>two</span>".into();
        let (a, b) = (splicer.marker(&first), splicer.marker(&second));
        let page = splicer.finish(format!("<p>{b}</p><p>{a}</p>"));
        let parts = page.into_parts();
        assert_eq!(parts.len(), 5);
        assert_eq!(parts[1].as_ptr(), second.as_ptr(), "shared, not copied");
        let whole: Vec<u8> = parts.concat();
        assert_eq!(
            String::from_utf8(whole).unwrap(),
            "<p><span>two</span></p><p><span>one</span></p>"
        );
    }

    #[test]
    fn a_marker_with_another_nonce_stays_as_it_is() {
        let splicer = Splicer::new("right");
        let piece: Arc<str> = "<b>x</b>".into();
        let marker = splicer.marker(&piece);
        let forged = marker.replace("right", "wrong");
        let page = splicer.finish(format!("{forged}|{marker}")).into_string();
        assert_eq!(page, format!("{forged}|<b>x</b>"));
    }
}
