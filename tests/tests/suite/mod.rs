mod asyncio_surface;
mod cli_input;
mod definitions;
mod codemode_limits;
mod codemode_results;
mod confinement;
mod policies;
