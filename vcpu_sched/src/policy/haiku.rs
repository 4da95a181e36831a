//! TEMP(skeleton): replaced by the real policy.
use crate::{SchedConfig, SchedError, Topology};
pub struct HaikuScheduler;
impl HaikuScheduler {
    pub fn new(_t: Topology, _c: SchedConfig) -> Result<Self, SchedError> {
        Err(SchedError::Config("skeleton".into()))
    }
}
impl super::VcpuScheduler for HaikuScheduler {
    fn name(&self) -> &'static str { todo!() }
    fn topology(&self) -> &Topology { todo!() }
    fn add_entity(&self, _: crate::EntitySpec, _: crate::Nanos) -> Result<crate::EntityId, SchedError> { todo!() }
    fn remove_entity(&self, _: crate::EntityId, _: crate::Nanos) -> Result<(), SchedError> { todo!() }
    fn wake(&self, _: crate::EntityId, _: crate::Nanos) -> Result<Option<crate::WakeDecision>, SchedError> { todo!() }
    fn schedule(&self, _: crate::CpuId, _: crate::Nanos, _: crate::StopReason) -> Result<crate::Dispatch, SchedError> { todo!() }
    fn set_priority(&self, _: crate::EntityId, _: u8, _: crate::Nanos) -> Result<(), SchedError> { todo!() }
    fn set_idle_core_search(&self, _: bool) { todo!() }
    fn snapshot(&self, _: crate::Nanos) -> crate::SchedSnapshot { todo!() }
}
