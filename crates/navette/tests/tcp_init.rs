//! `navette::init` from the environment: started alone, a job of one.

#[test]
fn a_process_started_alone_is_rank_0_of_1() {
    if std::env::vars().any(|(k, _)| k.starts_with("NAVETTE_")) {
        eprintln!("skipped: started by a launcher (NAVETTE_* variables set)");
        return;
    }
    let node = navette::init().expect("init as a singleton");
    assert_eq!((node.rank(), node.size()), (0, 1));
    node.finalize().expect("finalize");
}
