//! flockd's HTTP port for operators: Prometheus metrics (`/metrics`, written by
//! prometheus-client), liveness (`/livez`), readiness (`/readyz`), and the daemon's own pages
//! (its console) through [`Pages`]. The daemon hands over a
//! [`MetricsSource`] that turns its counters into a [`MetricsSnapshot`] at each scrape; nothing
//! here runs on the command path.

mod exposition;
mod http;
mod pages;
mod snapshot;

pub use exposition::{MetricsSource, registry, render};
pub use http::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS, MAX_HEADER_BYTES, serve};
pub use pages::{PageBody, PageRequest, PageResponse, Pages};
pub use snapshot::{
    CommandErrors, CommandMetrics, HistogramData, MetricsSnapshot, RaftGroupMetrics, RaftMetrics,
};
