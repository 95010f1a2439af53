//! Which module runs each client command.

use super::args::{ClientArgs, Command, PluginCmd};
use super::client::{CliError, Client};
use super::{
    apps, namespaces, plugins, preferences, profiles, runs, schedules, securekeys, system,
    templates, tokens, usage,
};

/// Runs a client command; the result is the process's exit code.
pub fn run(args: &ClientArgs, command: Command) -> Result<u8, CliError> {
    if let Command::Store(cmd) = command {
        return super::store::run(cmd).map(|()| 0);
    }
    if let Command::Plugin(PluginCmd::Test(test)) = command {
        return plugins::test(test, args.json);
    }
    let client = Client::new(args)?;
    let json = args.json;
    match command {
        Command::Serve(_)
        | Command::Shim { .. }
        | Command::Store(_)
        | Command::Plugin(PluginCmd::Test(_)) => {
            Err(CliError::Usage("not a client command".into()))
        }
        Command::Namespace(cmd) => namespaces::namespace(&client, json, cmd).map(|()| 0),
        Command::Provisioner(cmd) => system::provisioner(&client, json, cmd).map(|()| 0),
        Command::Profile(cmd) => profiles::profile(&client, json, *cmd).map(|()| 0),
        Command::Pref(cmd) => preferences::pref(&client, json, cmd).map(|()| 0),
        Command::App(cmd) => apps::app(&client, json, cmd).map(|()| 0),
        Command::Run(cmd) => runs::run(&client, json, cmd),
        Command::Schedule(cmd) => schedules::schedule(&client, json, *cmd).map(|()| 0),
        Command::Template(cmd) => templates::template(&client, json, cmd).map(|()| 0),
        Command::Plan(args) => templates::plan(&client, json, args).map(|()| 0),
        Command::Secure(cmd) => securekeys::secure(&client, json, cmd).map(|()| 0),
        Command::Janitor(cmd) => system::janitor(&client, json, cmd).map(|()| 0),
        Command::Server(cmd) => system::server(&client, json, cmd).map(|()| 0),
        Command::Token(cmd) => tokens::token(&client, json, cmd).map(|()| 0),
        Command::Audit(args) => tokens::audit(&client, json, args).map(|()| 0),
        Command::Usage(args) => usage::usage(&client, json, args).map(|()| 0),
        Command::Prices(cmd) => usage::prices(&client, json, cmd).map(|()| 0),
        Command::Plugin(PluginCmd::List) => plugins::list(&client, json).map(|()| 0),
    }
}
