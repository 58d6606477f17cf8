"""GPU usage read straight from slurmdbd's MariaDB."""
