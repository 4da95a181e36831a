//! The LAPIC timer: one-shot, periodic, TSC-deadline, divide values,
//! current count, masking, mode changes, and what reaches `set_timer`.

use super::*;

const VECTOR: u32 = 0xEE;
const ONE_SHOT: u32 = TIMER_MODE_ONE_SHOT << LVT_TIMER_MODE_SHIFT;
const PERIODIC: u32 = TIMER_MODE_PERIODIC << LVT_TIMER_MODE_SHIFT;
const TSC_DEADLINE: u32 = TIMER_MODE_TSC_DEADLINE << LVT_TIMER_MODE_SHIFT;
const DIVIDE_BY_1: u32 = 0b1011;

fn setup(mode: u32) -> (Arc<IrqChip>, Arc<FakeHost>) {
    let (chip, host) = enabled_chip(2);
    write(&chip, 1, APIC_TIMER_DIVIDE, DIVIDE_BY_1);
    write(&chip, 1, APIC_LVT_TIMER, mode | VECTOR);
    host.take_timers();
    (chip, host)
}

#[test]
fn one_shot_fires_once_at_count_times_divisor() {
    let (chip, host) = setup(ONE_SHOT);
    host.set_now(10_000);
    write(&chip, 1, APIC_TIMER_INITIAL, 1000);
    assert_eq!(host.take_timers(), vec![(1, Some(11_000))]);
    assert_eq!(read(&chip, 1, APIC_TIMER_CURRENT), 1000);
    host.set_now(10_250);
    assert_eq!(read(&chip, 1, APIC_TIMER_CURRENT), 750);
    // An early expiry: nothing raised, the host timer armed again.
    host.set_now(10_999);
    chip.timer_expired(1);
    assert_eq!(irr(&chip, 1), Vec::<u8>::new());
    assert_eq!(host.take_timers(), vec![(1, Some(11_000))]);
    assert_eq!(host.take_notified(), Vec::<u32>::new());
    // Due: the interrupt, a notify, the host timer cancelled.
    host.set_now(11_000);
    chip.timer_expired(1);
    assert_eq!(irr(&chip, 1), vec![0xEE]);
    assert_eq!(host.take_notified(), vec![1]);
    assert_eq!(
        host.take_causes(),
        vec![(1, crate::irqchip::NotifyCause::Timer)]
    );
    assert_eq!(host.take_timers(), vec![(1, None)]);
    assert_eq!(read(&chip, 1, APIC_TIMER_CURRENT), 0, "0 after expiry");
    assert_eq!(
        read(&chip, 1, APIC_TIMER_INITIAL),
        1000,
        "initial count kept"
    );
    // A stale second expiry does nothing.
    drain(&chip, 1);
    host.set_now(20_000);
    chip.timer_expired(1);
    assert_eq!(irr(&chip, 1), Vec::<u8>::new());
    assert_eq!(host.take_timers(), vec![]);
}

#[test]
fn every_divide_value() {
    let table = [
        (0b0000, 2),
        (0b0001, 4),
        (0b0010, 8),
        (0b0011, 16),
        (0b1000, 32),
        (0b1001, 64),
        (0b1010, 128),
        (0b1011, 1),
    ];
    for (config, divisor) in table {
        let (chip, host) = setup(ONE_SHOT);
        write(&chip, 1, APIC_TIMER_DIVIDE, config);
        host.set_now(500);
        write(&chip, 1, APIC_TIMER_INITIAL, 100);
        assert_eq!(
            host.take_timers(),
            vec![(1, Some(500 + 100 * divisor))],
            "divide {config:#06b}"
        );
        // Half-way: half the counts left.
        host.set_now(500 + 50 * divisor);
        assert_eq!(
            read(&chip, 1, APIC_TIMER_CURRENT),
            50,
            "divide {config:#06b}"
        );
    }
}

#[test]
fn writing_zero_stops_the_timer() {
    let (chip, host) = setup(PERIODIC);
    write(&chip, 1, APIC_TIMER_INITIAL, 500_000);
    write(&chip, 1, APIC_TIMER_INITIAL, 0);
    assert_eq!(host.take_timers(), vec![(1, Some(500_000)), (1, None)]);
    assert_eq!(read(&chip, 1, APIC_TIMER_CURRENT), 0);
    // Rewriting the same count restarts the count-down from now.
    write(&chip, 1, APIC_TIMER_INITIAL, 500_000);
    host.set_now(100);
    write(&chip, 1, APIC_TIMER_INITIAL, 500_000);
    assert_eq!(
        host.take_timers(),
        vec![(1, Some(500_000)), (1, Some(500_100))]
    );
}

#[test]
fn periodic_rearms_from_the_deadline_without_drift() {
    let (chip, host) = setup(PERIODIC);
    write(&chip, 1, APIC_TIMER_INITIAL, 300_000);
    assert_eq!(host.take_timers(), vec![(1, Some(300_000))]);
    // Handled 500 ns late: the next deadline is still 600_000.
    host.set_now(300_500);
    chip.timer_expired(1);
    assert_eq!(host.take_timers(), vec![(1, Some(600_000))]);
    assert_eq!(drain(&chip, 1), vec![0xEE]);
    host.set_now(450_000);
    assert_eq!(read(&chip, 1, APIC_TIMER_CURRENT), 150_000);
    // Three periods missed: one interrupt, next deadline on the grid.
    host.set_now(1_300_000);
    chip.timer_expired(1);
    assert_eq!(host.take_timers(), vec![(1, Some(1_500_000))]);
    assert_eq!(drain(&chip, 1), vec![0xEE]);
    assert_eq!(read(&chip, 1, APIC_TIMER_CURRENT), 200_000);
}

#[test]
fn short_periods_are_stretched() {
    let (chip, host) = setup(PERIODIC);
    write(&chip, 1, APIC_TIMER_INITIAL, 10);
    assert_eq!(host.take_timers(), vec![(1, Some(MIN_PERIODIC_NS))]);
    assert_eq!(
        read(&chip, 1, APIC_TIMER_CURRENT),
        10,
        "never above the initial count"
    );
    host.set_now(MIN_PERIODIC_NS);
    chip.timer_expired(1);
    assert_eq!(host.take_timers(), vec![(1, Some(2 * MIN_PERIODIC_NS))]);
    // A one-shot timer is not limited.
    let (chip, host) = setup(ONE_SHOT);
    write(&chip, 1, APIC_TIMER_INITIAL, 10);
    assert_eq!(host.take_timers(), vec![(1, Some(10))]);
}

#[test]
fn masked_timer_counts_without_interrupts() {
    let (chip, host) = setup(PERIODIC | LVT_MASKED);
    write(&chip, 1, APIC_TIMER_INITIAL, 400_000);
    host.set_now(400_000);
    chip.timer_expired(1);
    assert_eq!(irr(&chip, 1), Vec::<u8>::new());
    assert_eq!(host.take_notified(), Vec::<u32>::new());
    assert_eq!(host.armed(1), Some(800_000), "still periodic");
    host.set_now(500_000);
    assert_eq!(read(&chip, 1, APIC_TIMER_CURRENT), 300_000);
    // Unmasked, the next expiry raises it.
    write(&chip, 1, APIC_LVT_TIMER, PERIODIC | VECTOR);
    host.set_now(800_000);
    chip.timer_expired(1);
    assert_eq!(irr(&chip, 1), vec![0xEE]);
}

#[test]
fn divide_change_keeps_the_remaining_counts() {
    let (chip, host) = setup(ONE_SHOT);
    write(&chip, 1, APIC_TIMER_INITIAL, 1000);
    host.set_now(400);
    write(&chip, 1, APIC_TIMER_DIVIDE, 0b0000); // by 2
    assert_eq!(host.take_timers(), vec![(1, Some(1000)), (1, Some(1600))]);
    assert_eq!(read(&chip, 1, APIC_TIMER_CURRENT), 600);
    host.set_now(1000);
    assert_eq!(read(&chip, 1, APIC_TIMER_CURRENT), 300);
}

#[test]
fn one_shot_periodic_switch_keeps_counting() {
    let (chip, host) = setup(ONE_SHOT);
    write(&chip, 1, APIC_TIMER_INITIAL, 1_000_000);
    host.set_now(600_000);
    write(&chip, 1, APIC_LVT_TIMER, PERIODIC | VECTOR);
    assert_eq!(read(&chip, 1, APIC_TIMER_CURRENT), 400_000, "not reset");
    assert_eq!(read(&chip, 1, APIC_TIMER_INITIAL), 1_000_000);
    assert_eq!(host.take_timers(), vec![(1, Some(1_000_000))], "no re-arm");
    host.set_now(1_000_000);
    chip.timer_expired(1);
    assert_eq!(
        host.take_timers(),
        vec![(1, Some(2_000_000))],
        "now periodic"
    );
    // Back to one-shot mid-period: runs out and stops.
    write(&chip, 1, APIC_LVT_TIMER, ONE_SHOT | VECTOR);
    host.set_now(2_000_000);
    chip.timer_expired(1);
    assert_eq!(host.take_timers(), vec![(1, None)]);
    assert_eq!(read(&chip, 1, APIC_TIMER_CURRENT), 0);
    // Expired one-shot switched to periodic stays at zero.
    write(&chip, 1, APIC_LVT_TIMER, PERIODIC | VECTOR);
    assert_eq!(read(&chip, 1, APIC_TIMER_CURRENT), 0);
    assert_eq!(host.take_timers(), vec![]);
}

#[test]
fn tsc_deadline_mode() {
    let (chip, host) = setup(TSC_DEADLINE);
    // The initial-count register is ignored in this mode.
    write(&chip, 1, APIC_TIMER_INITIAL, 1000);
    assert_eq!(read(&chip, 1, APIC_TIMER_INITIAL), 0);
    assert_eq!(read(&chip, 1, APIC_TIMER_CURRENT), 0);
    assert_eq!(host.take_timers(), vec![]);
    // An odd TSC: the ns conversion rounds down, the TSC check holds it back.
    chip.msr_write(1, MSR_IA32_TSC_DEADLINE, 3_000_001).unwrap();
    assert_eq!(chip.msr_read(1, MSR_IA32_TSC_DEADLINE), Ok(3_000_001));
    assert_eq!(host.take_timers(), vec![(1, Some(1_500_000))]);
    host.set_now(1_500_000);
    chip.timer_expired(1);
    assert_eq!(irr(&chip, 1), Vec::<u8>::new(), "TSC 3_000_000 < deadline");
    assert_eq!(host.take_timers(), vec![(1, Some(1_500_001))]);
    host.set_now(1_500_001);
    chip.timer_expired(1);
    assert_eq!(irr(&chip, 1), vec![0xEE]);
    assert_eq!(host.take_notified(), vec![1]);
    assert_eq!(host.take_timers(), vec![(1, None)]);
    assert_eq!(
        chip.msr_read(1, MSR_IA32_TSC_DEADLINE),
        Ok(0),
        "cleared on expiry"
    );
}

#[test]
fn tsc_deadline_in_the_past_fires_at_once() {
    let (chip, host) = setup(TSC_DEADLINE);
    host.set_now(1000);
    chip.msr_write(1, MSR_IA32_TSC_DEADLINE, 2000).unwrap();
    assert_eq!(irr(&chip, 1), vec![0xEE]);
    assert!(chip.has_pending_hint(1));
    assert_eq!(host.take_notified(), vec![1]);
    assert_eq!(chip.msr_read(1, MSR_IA32_TSC_DEADLINE), Ok(0));
    assert_eq!(host.take_timers(), vec![], "never armed");
}

#[test]
fn tsc_deadline_zero_disarms_and_other_modes_ignore_it() {
    let (chip, host) = setup(TSC_DEADLINE);
    chip.msr_write(1, MSR_IA32_TSC_DEADLINE, 10_000).unwrap();
    chip.msr_write(1, MSR_IA32_TSC_DEADLINE, 0).unwrap();
    assert_eq!(host.take_timers(), vec![(1, Some(5000)), (1, None)]);
    let (chip, host) = setup(ONE_SHOT);
    chip.msr_write(1, MSR_IA32_TSC_DEADLINE, 10_000).unwrap();
    assert_eq!(chip.msr_read(1, MSR_IA32_TSC_DEADLINE), Ok(0));
    assert_eq!(host.take_timers(), vec![]);
}

#[test]
fn entering_or_leaving_tsc_deadline_mode_disarms() {
    let (chip, host) = setup(ONE_SHOT);
    write(&chip, 1, APIC_TIMER_INITIAL, 1000);
    write(&chip, 1, APIC_LVT_TIMER, TSC_DEADLINE | VECTOR);
    assert_eq!(host.take_timers(), vec![(1, Some(1000)), (1, None)]);
    assert_eq!(read(&chip, 1, APIC_TIMER_INITIAL), 0);
    chip.msr_write(1, MSR_IA32_TSC_DEADLINE, 10_000).unwrap();
    write(&chip, 1, APIC_LVT_TIMER, PERIODIC | VECTOR);
    assert_eq!(host.take_timers(), vec![(1, Some(5000)), (1, None)]);
    assert_eq!(chip.msr_read(1, MSR_IA32_TSC_DEADLINE), Ok(0));
    // Back in TSC-deadline mode the old deadline is gone.
    write(&chip, 1, APIC_LVT_TIMER, TSC_DEADLINE | VECTOR);
    assert_eq!(chip.msr_read(1, MSR_IA32_TSC_DEADLINE), Ok(0));
}

#[test]
fn reserved_timer_mode_stops_the_timer() {
    let (chip, host) = setup(ONE_SHOT);
    write(&chip, 1, APIC_TIMER_INITIAL, 1000);
    write(&chip, 1, APIC_LVT_TIMER, 3 << LVT_TIMER_MODE_SHIFT | VECTOR);
    assert_eq!(host.take_timers(), vec![(1, Some(1000)), (1, None)]);
    assert_eq!(read(&chip, 1, APIC_TIMER_CURRENT), 0);
    write(&chip, 1, APIC_TIMER_INITIAL, 1000);
    assert_eq!(host.take_timers(), vec![], "does not run in that mode");
}

#[test]
fn x2apic_timer_registers() {
    let (chip, host) = setup(ONE_SHOT);
    enable_x2apic(&chip, 1);
    chip.msr_write(1, x2msr(APIC_TIMER_INITIAL), 2000).unwrap();
    assert_eq!(host.take_timers(), vec![(1, Some(2000))]);
    host.set_now(500);
    assert_eq!(chip.msr_read(1, x2msr(APIC_TIMER_CURRENT)), Ok(1500));
}
