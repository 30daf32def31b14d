from . import everything as everything
