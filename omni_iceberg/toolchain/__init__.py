"""Developer tooling the project installs for itself: verified Maven downloads, the Trino server, a JDK."""
