//! Sans-IO scheduler of ray-rs: resources, policies, placement groups.
