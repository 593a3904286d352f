"""modelc.scheduler"""
