"""One router per resource; each handler is a call into ``suanli.control``."""
