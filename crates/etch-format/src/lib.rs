pub mod generated;
