//! Many threads on one chip: vCPU threads pass a token around by IPI while
//! another thread toggles edge and level I/O APIC pins broadcast to every
//! APIC (EOI broadcasts, I/O APIC lock then APIC locks) and fires timers.
//! The token must go round every time: no lost interrupt, no missed hint,
//! no deadlock.

use super::*;
use crate::bus::IoContext;
use std::sync::atomic::AtomicBool;
use std::thread;
use std::time::{Duration, Instant};

const VCPUS: u32 = 4;
const ROUNDS: u32 = 200;
const TOKEN: u8 = 0x80;

fn program(chip: &Arc<IrqChip>, pin: u8, entry: u64) {
    let dev = chip.ioapic_mmio();
    let mut dev = dev.lock().unwrap();
    let ctx = IoContext { vcpu: 0 };
    for (index, value) in [
        (0x11 + 2 * pin, (entry >> 32) as u32),
        (0x10 + 2 * pin, entry as u32),
    ] {
        dev.write(ctx, IOAPIC_IOREGSEL, &[index, 0, 0, 0]);
        dev.write(ctx, IOAPIC_IOWIN, &value.to_le_bytes());
    }
}

#[test]
fn token_ring_under_contention() {
    let (chip, host) = enabled_chip(VCPUS);
    let broadcast = 0xFFu64 << REDIR_DEST_SHIFT;
    program(&chip, 2, 0x30 | broadcast);
    program(&chip, 3, 0x31 | REDIR_TRIGGER_LEVEL | broadcast);
    for v in 0..VCPUS {
        write(
            &chip,
            v,
            APIC_LVT_TIMER,
            TIMER_MODE_PERIODIC << LVT_TIMER_MODE_SHIFT | 0x40,
        );
        write(&chip, v, APIC_TIMER_INITIAL, 1);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let noise = {
        let (chip, host, stop) = (chip.clone(), host.clone(), stop.clone());
        thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                chip.set_irq(2, n % 2 == 0);
                chip.set_irq(3, n % 3 != 0);
                host.set_now(n * 1000);
                chip.timer_expired((n % u64::from(VCPUS)) as u32);
                chip.lapic_state((n % u64::from(VCPUS)) as u32);
                if n % 1024 == 0 {
                    host.take_notified();
                    host.take_timers();
                }
            }
        })
    };
    send_ipi(&chip, 0, 1, ICR_LEVEL_ASSERT | u32::from(TOKEN));
    let give_up = Instant::now() + Duration::from_secs(120);
    let vcpus: Vec<_> = (0..VCPUS)
        .map(|v| {
            let chip = chip.clone();
            thread::spawn(move || {
                let mut passes = 0;
                while passes < ROUNDS {
                    assert!(
                        Instant::now() < give_up,
                        "vcpu{v}: token lost after {passes} passes"
                    );
                    if !chip.has_pending_hint(v) {
                        thread::yield_now();
                        continue;
                    }
                    chip.take_events(v);
                    if let Some(vector) = chip.acknowledge(v) {
                        write(&chip, v, APIC_EOI, 0);
                        if vector == TOKEN {
                            passes += 1;
                            send_ipi(
                                &chip,
                                v,
                                ((v + 1) % VCPUS) as u8,
                                ICR_LEVEL_ASSERT | u32::from(TOKEN),
                            );
                        }
                    }
                }
            })
        })
        .collect();
    for t in vcpus {
        t.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    noise.join().unwrap();
}
