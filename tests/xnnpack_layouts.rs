//! The XNNPACK fixtures with image graphs run in both of the delegate's layouts
//! (`etch::xnnpack::Layout`): internal values channels-first (NCHW kernels), and XNNPACK's
//! own NHWC (channels-last convolutions, depthwise convolutions and pooling), whichever
//! the default picks for the graph (`tests/xnnpack.rs`), and match ExecuTorch's outputs in
//! both.

mod common;

use etch::xnnpack::{Layout, set_layout};
use std::sync::Mutex;

/// The layout is process-wide: one test at a time sets it.
static LAYOUT: Mutex<()> = Mutex::new(());

fn both_layouts(name: &str) {
    let _g = LAYOUT.lock().unwrap_or_else(|e| e.into_inner());
    for layout in [Layout::ChannelsFirst, Layout::Nhwc] {
        set_layout(Some(layout));
        common::run_xnnpack_fixture(name);
    }
    set_layout(None);
}

#[test]
fn tiny_cnn() {
    both_layouts("tiny_cnn");
}

#[test]
fn more_nodes() {
    both_layouts("more_nodes");
}

#[test]
fn mobilenet_v2_025() {
    both_layouts("mobilenet_v2_025");
}

#[test]
fn elementwise() {
    both_layouts("elementwise");
}

#[test]
fn tiny_cnn_fp16() {
    both_layouts("tiny_cnn_fp16");
}
