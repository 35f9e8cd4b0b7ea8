//! Graphs called with fewer rows than declared.
//!
//! ExecuTorch's LLM exports (`export_llm` with XNNPACK and `8da4w`) give the prompt a
//! dynamic length: the delegate's graph declares the upper bound (`[1, 31, 64]` for a
//! 31-token bound) and each call passes the real length (`[1, 5, 64]` for the prompt, then
//! `[1, 1, 64]` per decode step). XNNPACK re-plans the shapes of the whole graph per call.
//! etch does it for graphs whose nodes all work row by row — dynamic quantization
//! (`XNNConvert` to qdint8) and fully-connected layers — where a call's shapes are the
//! declared ones with the leading (row) dims replaced: every view of a non-constant value
//! is resized in place (they are planned at the declared size, so they fit), nothing is
//! allocated. Other graphs keep static shapes.

use super::plan::Binding;
use etch_core::{EValue, Error, Result};

/// Node kinds that compute each row of their inputs on its own.
const ROW_WISE: &[&str] = &["XNNConvert", "XNNFullyConnected"];

/// How a view's sizes start.
#[derive(Clone, Copy)]
enum Lead {
    /// With the declared leading dims (`[1, 31, ...]`).
    Dims,
    /// With their product, as one dim (`[31, ...]`).
    Flat,
}

/// The row-dynamic views of a plan, and the leading dims they have now.
pub struct Rows {
    /// The leading dims the graph declares (all its arguments start with them).
    declared: Vec<usize>,
    /// The leading dims the views have now.
    current: Vec<usize>,
    /// The leading dims of the call being bound.
    call: Vec<usize>,
    /// Room for an argument's expected shape (no allocation per call).
    buf: Vec<usize>,
    views: Vec<(u32, Lead)>,
}

impl Rows {
    /// The row-dynamic view of a plan, or `None` when its shapes must stay static: a node
    /// that is not row-wise, arguments that do not share their leading dims, or a view of
    /// a non-constant value (`data_views`) that does not start with them.
    pub fn analyse(
        node_names: &[&str],
        bindings: &[Binding],
        values: &[EValue],
        data_views: &[u32],
    ) -> Option<Rows> {
        if node_names.is_empty() || !node_names.iter().all(|n| ROW_WISE.contains(n)) {
            return None;
        }
        let first = bindings.first()?;
        let declared = first.dims.get(..first.dims.len().checked_sub(1)?)?.to_vec();
        let rows: usize = declared.iter().product();
        if declared.is_empty() || rows <= 1 {
            return None;
        }
        let shares = |s: &[usize]| s.len() > declared.len() && s[..declared.len()] == declared[..];
        if !bindings.iter().all(|b| shares(&b.dims)) {
            return None;
        }
        let mut views = Vec::with_capacity(data_views.len());
        for &v in data_views {
            let EValue::Tensor(t) = &values[v as usize] else {
                return None;
            };
            let s = t.sizes();
            let lead = if shares(s) {
                Lead::Dims
            } else if s.len() >= 2 && s[0] == rows {
                Lead::Flat
            } else {
                return None;
            };
            views.push((v, lead));
        }
        Some(Rows {
            current: declared.clone(),
            call: declared.clone(),
            buf: Vec::with_capacity(etch_core::MAX_DIMS),
            declared,
            views,
        })
    }

    /// Takes the leading dims of a call from its first argument's `sizes` (declared as
    /// `declared_dims`): the same rank and trailing dims, and at least one and at most the
    /// declared rows. Otherwise the call keeps the declared dims (and fails the shape check).
    pub fn begin_call(&mut self, declared_dims: &[usize], sizes: &[usize]) {
        let n = self.declared.len();
        let rows: usize = sizes.iter().take(n).product();
        let ok = sizes.len() == declared_dims.len()
            && sizes[n..] == declared_dims[n..]
            && rows >= 1
            && rows <= self.declared.iter().product();
        self.call.clear();
        self.call
            .extend_from_slice(if ok { &sizes[..n] } else { &self.declared });
    }

    /// An argument's declared shape `dims` with the call's leading dims.
    pub fn expected(&mut self, dims: &[usize]) -> &[usize] {
        self.buf.clear();
        self.buf.extend_from_slice(&self.call);
        self.buf.extend_from_slice(&dims[self.declared.len()..]);
        &self.buf
    }

    /// Resizes every row-dynamic view to the call's leading dims (no-op when they have
    /// them already). External views must point at the call's arguments first.
    pub fn apply(&mut self, values: &mut [EValue]) -> Result<()> {
        let lead = self.call.as_slice();
        if lead == self.current.as_slice() {
            return Ok(());
        }
        let rows: usize = lead.iter().product();
        let mut sizes = [0usize; etch_core::MAX_DIMS];
        for &(v, kind) in &self.views {
            let EValue::Tensor(t) = &mut values[v as usize] else {
                return Err(Error::internal("row view is not a tensor"));
            };
            let old = t.sizes();
            let (head, skip): (&[usize], usize) = match kind {
                Lead::Dims => (lead, self.declared.len()),
                Lead::Flat => (std::slice::from_ref(&rows), 1),
            };
            let n = head.len() + old.len() - skip;
            if n > sizes.len() {
                return Err(Error::not_supported(
                    "a row-dynamic view of more than 16 dims",
                ));
            }
            sizes[..head.len()].copy_from_slice(head);
            sizes[head.len()..n].copy_from_slice(&old[skip..]);
            t.resize(&sizes[..n])?;
        }
        self.current.clear();
        self.current.extend_from_slice(&self.call);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Rows {
        Rows {
            declared: vec![1, 31],
            current: vec![1, 31],
            call: vec![1, 31],
            buf: Vec::with_capacity(etch_core::MAX_DIMS),
            views: Vec::new(),
        }
    }

    #[test]
    fn a_call_takes_the_leading_dims_of_its_first_argument() {
        let mut r = rows();
        r.begin_call(&[1, 31, 64], &[1, 5, 64]);
        assert_eq!(r.expected(&[1, 31, 128]), &[1, 5, 128]);
        r.begin_call(&[1, 31, 64], &[1, 31, 64]);
        assert_eq!(r.expected(&[1, 31, 128]), &[1, 31, 128]);
    }

    #[test]
    fn other_shapes_keep_the_declared_dims() {
        let mut r = rows();
        // More rows than declared, another trailing dim, another rank, no rows: the call
        // is checked against the declared shape (and fails there).
        for s in [&[1, 32, 64][..], &[1, 5, 32], &[5, 64], &[1, 0, 64]] {
            r.begin_call(&[1, 31, 64], s);
            assert_eq!(r.expected(&[1, 31, 64]), &[1, 31, 64], "{s:?}");
        }
    }
}
