"""modelc.server"""
