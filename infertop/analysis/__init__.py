"""Pure functions over the session: stages, flame trees, shares. Nothing here renders."""
