//! Plugins: provisioners as outside programs, in any language, held to the same contract as
//! the built-ins.
//!
//! A plugin is a directory with a descriptor ([`descriptor`], `plugin.json`) naming the
//! command that runs it. ebb talks to the plugin's processes over their stdin and stdout, one
//! JSON object per line ([`protocol`]), starting them when calls need them and killing and
//! restarting them when they crash, hang or misbehave ([`process`]). To the rest of ebb a
//! provisioner plugin is one more [`ebb_spi::Provisioner`] ([`provisioner`]): the framework
//! persists every resource around its calls, so a plugin keeps no state of its own and gets
//! the built-ins' crash safety, retries and janitor. The conformance kit ([`conformance`])
//! drives any provisioner, plugin or built-in, through the contract's cases.

pub mod automator;
pub mod conformance;
pub mod descriptor;
pub mod process;
pub mod protocol;
pub mod provisioner;

pub use automator::PluginAutomator;
pub use descriptor::{Descriptor, DescriptorError, Guard, Kind};
pub use process::Health;
pub use provisioner::PluginProvisioner;

/// The plugin protocol this ebb speaks. A descriptor and a plugin's `hello` must name it.
pub const PROTOCOL: u32 = 1;
