mod skel {
    include!(concat!(env!("OUT_DIR"), "/tachy.skel.rs"));
}
