"""init_logger with the *_once methods the attention module calls."""
import functools
import logging


class _Logger(logging.LoggerAdapter):
    def process(self, msg, kwargs):
        return msg, kwargs

    @functools.lru_cache(maxsize=None)
    def _once(self, level, msg):
        self.log(level, msg)

    def debug_once(self, msg, *args, **kwargs):
        self._once(logging.DEBUG, msg % args if args else msg)

    def info_once(self, msg, *args, **kwargs):
        self._once(logging.INFO, msg % args if args else msg)

    def warning_once(self, msg, *args, **kwargs):
        self._once(logging.WARNING, msg % args if args else msg)


def init_logger(name):
    return _Logger(logging.getLogger(name), {})
