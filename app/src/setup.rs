//! Once-per-process setup the console needs before it renders its first page.

/// leptos_meta puts each page's `<title>` in place on the async runtime (tokio): once
/// per process, before the first page (a second call changes nothing).
pub fn init_executor() {
    let _ = any_spawner::Executor::init_tokio();
}
