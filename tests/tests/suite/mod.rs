mod asyncio_surface;
mod cli_input;
mod codemode_limits;
mod codemode_results;
mod confinement;
mod conformance;
mod definitions;
mod policies;
