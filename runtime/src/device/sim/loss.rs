//! Losing the simulated device, as a sticky error (an illegal address) loses a GPU:
//! a test picks the launch that fails with [`DeviceError::Lost`]; from then on every
//! call fails the same way until [`Device::recover`](crate::device::Device::recover)
//! resets the device, which the test may also make fail.

use std::sync::Mutex;

use crate::device::DeviceError;

/// The loss a test planned for a [`SimDevice`](super::SimDevice) (see
/// [`SimDevice::loss`](super::SimDevice::loss)).
#[derive(Debug, Default)]
pub struct Loss {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Launches left before the one that is lost.
    countdown: Option<u64>,
    /// Why the device is lost, while it is.
    lost: Option<String>,
    refuse_recovery: bool,
    recoveries: u64,
}

impl Loss {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The `n`-th launch from now (1: the next one) fails and loses the device.
    pub fn at_launch(&self, n: u64) {
        self.state().countdown = Some(n.max(1) - 1);
    }

    /// Resetting the device fails from now on.
    pub fn refuse_recovery(&self) {
        self.state().refuse_recovery = true;
    }

    /// Successful resets so far.
    pub fn recoveries(&self) -> u64 {
        self.state().recoveries
    }

    /// Fails while the device is lost.
    pub(super) fn check(&self) -> Result<(), DeviceError> {
        match &self.state().lost {
            Some(why) => Err(DeviceError::Lost(why.clone())),
            None => Ok(()),
        }
    }

    /// A launch: fails while lost, and is the lost one when the countdown ends.
    pub(super) fn launch(&self) -> Result<(), DeviceError> {
        self.check()?;
        let mut state = self.state();
        match state.countdown {
            Some(0) => {
                let why = "an illegal memory access (simulated)".to_owned();
                state.countdown = None;
                state.lost = Some(why.clone());
                Err(DeviceError::Lost(why))
            }
            Some(n) => {
                state.countdown = Some(n - 1);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Resets the device, unless the test refused it.
    pub(super) fn recover(&self) -> Result<(), DeviceError> {
        let mut state = self.state();
        if state.refuse_recovery {
            return Err(DeviceError::Failure("the simulated device could not be reset".into()));
        }
        state.lost = None;
        state.recoveries += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_planned_launch_loses_the_device_until_it_is_reset() {
        let loss = Loss::default();
        loss.at_launch(2);
        assert_eq!(loss.launch(), Ok(()));
        assert!(matches!(loss.launch(), Err(DeviceError::Lost(_))));
        assert!(matches!(loss.check(), Err(DeviceError::Lost(_))), "sticky");
        assert_eq!((loss.recover(), loss.recoveries()), (Ok(()), 1));
        assert_eq!((loss.check(), loss.launch()), (Ok(()), Ok(())), "once");
        loss.refuse_recovery();
        assert!(loss.recover().is_err());
    }
}
